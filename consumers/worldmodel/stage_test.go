package worldmodel

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

var stageNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func rolloutRecord(t testing.TB, r topics.Rollout) *kgo.Record {
	t.Helper()
	rec, err := topics.NewNames("").RolloutRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func baseRollout() topics.Rollout {
	return topics.Rollout{
		RolloutRef: topics.RolloutRef{RunID: "run", Step: 2, GroupID: "2-0", RolloutID: "2-0-1", Stream: "main", PolicyVersion: "ckpt-2"},
		Anchor:     true, Index: 1, Prompt: "task", Artifact: "solution", CreatedAt: stageNow,
	}
}

// scripted returns a fixed result and records the input it saw.
type scripted struct {
	res Result
	err error
	mu  sync.Mutex
	got []Input
}

func (s *scripted) Score(_ context.Context, in Input) (Result, error) {
	s.mu.Lock()
	s.got = append(s.got, in)
	s.mu.Unlock()
	return s.res, s.err
}

func TestHandler(t *testing.T) {
	store, err := artifact.NewStore(filepath.Join(t.TempDir(), "claims"), 0)
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 100))
	ref, err := store.Put(big)
	if err != nil {
		t.Fatal(err)
	}
	byRef := baseRollout()
	byRef.Artifact, byRef.ArtifactURI, byRef.ArtifactSHA256, byRef.ArtifactSize = "", ref.URI, ref.SHA256, ref.Size
	mismatch := byRef
	mismatch.ArtifactSHA256 = artifact.Digest([]byte("other"))
	missing := byRef
	missing.ArtifactURI = "file://" + filepath.Join(store.Dir(), mismatch.ArtifactSHA256)
	missing.ArtifactSHA256 = mismatch.ArtifactSHA256

	score := 0.75
	tests := []struct {
		name      string
		rollout   topics.Rollout
		res       Result
		resolver  artifact.Resolver
		want      topics.PredictedReward
		wantInput string // artifact the scorer must see; "" = scorer not called
	}{
		{name: "ok", rollout: baseRollout(), res: Result{Score: 0.75, Status: StatusOK, Attempts: 2, Latency: 1500 * time.Microsecond},
			want: topics.PredictedReward{Score: &score, Status: topics.StatusOK, Attempts: 2, LatencyMS: 1.5}, wantInput: "solution"},
		{name: "timeout", rollout: baseRollout(), res: Result{Status: StatusTimeout, Reason: "request timed out after 1s", Attempts: 4},
			want: topics.PredictedReward{Status: topics.StatusTimeout, Reason: "request timed out after 1s", Attempts: 4}, wantInput: "solution"},
		{name: "error without reason", rollout: baseRollout(), res: Result{Status: StatusError, Attempts: 1},
			want: topics.PredictedReward{Status: topics.StatusError, Reason: "error", Attempts: 1}, wantInput: "solution"},
		{name: "invalid reply", rollout: baseRollout(), res: Result{Status: StatusInvalid, Reason: "no number", Attempts: 1},
			want: topics.PredictedReward{Status: topics.StatusInvalid, Reason: "no number", Attempts: 1}, wantInput: "solution"},
		{name: "by reference resolved", rollout: byRef, resolver: store, res: Result{Score: 0.75, Status: StatusOK, Attempts: 1},
			want: topics.PredictedReward{Score: &score, Status: topics.StatusOK, Attempts: 1}, wantInput: string(big)},
		{name: "digest mismatch", rollout: mismatch, resolver: store,
			want: topics.PredictedReward{Status: topics.StatusInvalid, Reason: "SHA-256 mismatch"}},
		{name: "unreachable", rollout: missing, resolver: store,
			want: topics.PredictedReward{Status: topics.StatusInvalid, Reason: "not found"}},
		{name: "no artifact dir", rollout: byRef,
			want: topics.PredictedReward{Status: topics.StatusInvalid, Reason: "no --artifact-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &scripted{res: tt.res}
			reg := prometheus.NewPedanticRegistry()
			h, err := NewHandler(HandlerConfig{Scorer: sc, Model: "m", Artifacts: tt.resolver, Now: func() time.Time { return stageNow }, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			outs, err := h.Handle(context.Background(), rolloutRecord(t, tt.rollout))
			// A failure is produced as a record and marked for the runtime, which counts it as
			// failed rather than ok and does not dead-letter it.
			var failed *stage.FailedError
			if tt.want.Status == topics.StatusOK && err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if tt.want.Status != topics.StatusOK && (!errors.As(err, &failed) || !errors.Is(err, ErrScoringFailed) || !strings.Contains(err.Error(), tt.want.Reason)) {
				t.Fatalf("Handle error = %v, want a stage.FailedError wrapping ErrScoringFailed with %q", err, tt.want.Reason)
			}
			if len(outs) != 1 || outs[0].Topic != topics.NewNames("").Predicted() || string(outs[0].Key) != "run" {
				t.Fatalf("outputs = %+v, want one predicted record keyed by run", outs)
			}
			got, err := topics.DecodePredicted(outs[0].Value)
			if err != nil {
				t.Fatal(err)
			}
			r := tt.rollout
			if got.RunID != r.RunID || got.Step != r.Step || got.GroupID != r.GroupID || got.RolloutID != r.RolloutID ||
				got.Stream != r.Stream || got.PolicyVersion != r.PolicyVersion || got.Anchor != r.Anchor || got.Model != "m" || !got.CreatedAt.Equal(stageNow) {
				t.Errorf("ids/labels not copied: %+v", got)
			}
			if got.Status != tt.want.Status || got.Attempts != tt.want.Attempts || got.LatencyMS != tt.want.LatencyMS {
				t.Errorf("got status %s attempts %d latency %v; want %+v", got.Status, got.Attempts, got.LatencyMS, tt.want)
			}
			if (got.Score == nil) != (tt.want.Score == nil) || (got.Score != nil && *got.Score != *tt.want.Score) {
				t.Errorf("score = %v, want %v", got.Score, tt.want.Score)
			}
			if !strings.Contains(got.Reason, tt.want.Reason) {
				t.Errorf("reason %q does not contain %q", got.Reason, tt.want.Reason)
			}
			switch {
			case tt.wantInput == "" && len(sc.got) != 0:
				t.Errorf("scorer called for an unresolvable rollout")
			case tt.wantInput != "" && (len(sc.got) != 1 || string(sc.got[0].Artifact) != tt.wantInput):
				t.Errorf("scorer saw %+v, want artifact %q", sc.got, tt.wantInput)
			}
			// Exactly the recorded failure status counts once; an ok rollout counts nowhere.
			samples := gatherSamples(t, reg)
			for _, st := range []topics.Status{topics.StatusTimeout, topics.StatusError, topics.StatusInvalid} {
				want := 0.0
				if st == tt.want.Status {
					want = 1
				}
				key := `wmrl_worldmodel_failures_total{status="` + string(st) + `"}`
				if v, ok := samples[key]; !ok || v != want {
					t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
				}
			}
		})
	}
}

func TestHandlerBadRecords(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Scorer: &scripted{res: Result{Status: StatusOK, Score: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, value string
		want        error
	}{
		{"not json", `{"schema": "wmrl.rollout.v1", `, topics.ErrMalformed},
		{"wrong schema", `{"schema": "wmrl.step.v1"}`, topics.ErrUnknownSchema},
		{"invalid id", `{"schema":"wmrl.rollout.v1","run_id":"a/b","step":0,"group_id":"g","rollout_id":"r","stream":"s","policy_version":"","anchor":false,"index":0,"created_at":"2026-01-01T00:00:00Z"}`, topics.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := h.Handle(context.Background(), &kgo.Record{Value: []byte(tt.value)})
			if !errors.Is(err, tt.want) || outs != nil {
				t.Fatalf("Handle = %v, %v; want error %v and no outputs", outs, err, tt.want)
			}
		})
	}
}

// TestHandlerHandsBackOnShutdown: a scorer interrupted by shutdown yields the context's error,
// which the runtime recognises and hands the record back instead of dead-lettering it.
func TestHandlerHandsBackOnShutdown(t *testing.T) {
	g := newGatedScorer([]string{"2-0-1"})
	h, err := NewHandler(HandlerConfig{Scorer: g})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.Handle(ctx, rolloutRecord(t, baseRollout()))
		errc <- err
	}()
	<-g.entered
	cancel()
	if err := <-errc; !errors.Is(err, ctx.Err()) || ctx.Err() == nil {
		t.Fatalf("Handle after cancel = %v, want %v", err, ctx.Err())
	}
}

// TestHandlerBoundsConcurrency runs many handlers at once (as the runtime does with 2×C) and
// checks that at most C scorer calls are ever in flight, and exactly C at the peak.
func TestHandlerBoundsConcurrency(t *testing.T) {
	const n, conc = 12, 3
	names := ids(n)
	g := newGatedScorer(names)
	h, err := NewHandler(HandlerConfig{Scorer: g, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, id := range names {
		r := baseRollout()
		r.RolloutID = id
		rec := rolloutRecord(t, r)
		wg.Go(func() {
			if outs, err := h.Handle(context.Background(), rec); (err != nil && !errors.Is(err, ErrScoringFailed)) || len(outs) != 1 {
				t.Errorf("Handle %s = %d outputs, %v", id, len(outs), err)
			}
		})
	}
	for range n {
		id := <-g.entered
		time.Sleep(time.Millisecond) // let any excess handler slip in if the bound were broken
		close(g.gates[id])
	}
	wg.Wait()
	if got := g.maxSeen.Load(); got != conc {
		t.Errorf("max scorer calls in flight %d, want exactly %d", got, conc)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r-%d", i)
	}
	return out
}

func TestNewHandlerRejectsNilScorer(t *testing.T) {
	if _, err := NewHandler(HandlerConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

// TestNewStageServesScorerMetrics checks that the stage's registry carries the handler's and the
// OpenAI scorer's series, so `wmrl worldmodel --metrics-addr` serves them without extra wiring.
func TestNewStageServesScorerMetrics(t *testing.T) {
	sc, err := NewOpenAIScorer(OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	st, err := NewStage(stage.Config{Names: topics.NewNames("wmtest."), Registry: reg,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}}, HandlerConfig{Scorer: sc})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Client().Close()
	samples := gatherSamples(t, reg)
	for _, key := range []string{
		`wmrl_worldmodel_failures_total{status="timeout"}`,
		`wmrl_worldmodel_retries_total{reason="429"}`,
		`wmrl_worldmodel_request_duration_seconds_count`,
		`wmrl_worldmodel_score_parse_failures_total`,
	} {
		if _, ok := samples[key]; !ok {
			t.Errorf("stage registry lacks %s", key)
		}
	}
	if _, err := NewStage(stage.Config{Names: topics.NewNames("wmtest."), Registry: reg,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}}, HandlerConfig{Scorer: sc}); err == nil {
		t.Fatal("a second world-model stage on the same registry was accepted; its series would collide")
	}
}
