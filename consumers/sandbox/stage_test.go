package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

var stageNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func anchorRollout(artifact string) topics.Rollout {
	return topics.Rollout{
		RolloutRef: topics.RolloutRef{RunID: "run", Step: 1, GroupID: "1-0", RolloutID: "1-0-3", Stream: "main", PolicyVersion: "v1"},
		Anchor:     true, Index: 3, Artifact: artifact, CreatedAt: stageNow,
	}
}

func encodeRollout(t *testing.T, r topics.Rollout) *kgo.Record {
	t.Helper()
	rec, err := topics.NewNames("").RolloutRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// behave executes artifacts that name their outcome, so one handler covers every status.
func behave(ctx context.Context, job Job) (float64, error) {
	switch string(job.Artifact) {
	case "ok":
		return 0.625, nil
	case "slow":
		<-ctx.Done()
		return 0, ctx.Err()
	case "crash":
		return 0, errors.New("segfault")
	case "bad":
		return 0, ErrInvalidArtifact
	case "big":
		return 0, errors.New(strings.Repeat("é", topics.MaxReasonLen))
	}
	if strings.HasPrefix(string(job.Artifact), "xxx") {
		return 0.25, nil
	}
	return 0, errors.New("unknown behaviour " + string(job.Artifact))
}

func TestHandler(t *testing.T) {
	store, err := artifact.NewStore(filepath.Join(t.TempDir(), "claims"), 0)
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 1000))
	ref, _ := store.Put(big)
	byRef := anchorRollout("")
	byRef.ArtifactURI, byRef.ArtifactSHA256, byRef.ArtifactSize = ref.URI, ref.SHA256, ref.Size
	tampered := byRef
	tampered.ArtifactSHA256 = artifact.Digest([]byte("y"))
	nonAnchor := anchorRollout("ok")
	nonAnchor.Anchor = false

	type want struct {
		none    bool // no output at all
		status  topics.Status
		score   *float64
		imputed bool
		reason  string
	}
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name    string
		rollout topics.Rollout
		policy  Policy
		store   artifact.Resolver
		want    want
	}{
		{"non-anchor skipped", nonAnchor, PolicyMissing, nil, want{none: true}},
		{"ok", anchorRollout("ok"), PolicyMissing, nil, want{status: topics.StatusOK, score: f(0.625)}},
		{"timeout missing", anchorRollout("slow"), PolicyMissing, nil, want{status: topics.StatusTimeout, reason: "exceeded timeout"}},
		{"timeout zero", anchorRollout("slow"), PolicyZero, nil, want{status: topics.StatusTimeout, score: f(0), imputed: true, reason: "exceeded timeout"}},
		{"error not imputed", anchorRollout("crash"), PolicyZero, nil, want{status: topics.StatusError, reason: "segfault"}},
		{"invalid artifact", anchorRollout("bad"), PolicyMissing, nil, want{status: topics.StatusInvalid, reason: "invalid artifact"}},
		{"long reason trimmed", anchorRollout("big"), PolicyMissing, nil, want{status: topics.StatusError, reason: "é"}},
		{"by reference", byRef, PolicyMissing, store, want{status: topics.StatusOK, score: f(0.25)}},
		{"digest mismatch", tampered, PolicyMissing, store, want{status: topics.StatusInvalid, reason: "SHA-256 mismatch"}},
		{"no artifact dir", byRef, PolicyMissing, nil, want{status: topics.StatusInvalid, reason: "no --artifact-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec, err := NewBuiltinExecutor(behave, BuiltinConfig{Timeout: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			pool, _ := NewPool(exec, 1)
			h, err := NewHandler(HandlerConfig{Pool: pool, Policy: tt.policy, Artifacts: tt.store, Now: func() time.Time { return stageNow }})
			if err != nil {
				t.Fatal(err)
			}
			outs, err := h.Handle(context.Background(), encodeRollout(t, tt.rollout))
			// A failed execution is produced as a record and marked for the runtime, which counts
			// it as failed rather than ok and does not dead-letter it.
			var failed *stage.FailedError
			if (tt.want.none || tt.want.status == topics.StatusOK) && err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if !tt.want.none && tt.want.status != topics.StatusOK && (!errors.As(err, &failed) || !errors.Is(err, ErrExecutionFailed) || !strings.Contains(err.Error(), string(tt.want.status))) {
				t.Fatalf("Handle error = %v, want a stage.FailedError wrapping ErrExecutionFailed naming %s", err, tt.want.status)
			}
			if tt.want.none {
				if len(outs) != 0 {
					t.Fatalf("non-anchor produced %d records", len(outs))
				}
				return
			}
			if len(outs) != 1 || outs[0].Topic != topics.NewNames("").Executed() {
				t.Fatalf("outputs %+v, want one executed record", outs)
			}
			got, err := topics.DecodeExecuted(outs[0].Value)
			if err != nil {
				t.Fatal(err)
			}
			r := tt.rollout
			if got.RunID != r.RunID || got.GroupID != r.GroupID || got.RolloutID != r.RolloutID || got.Step != r.Step ||
				got.Stream != r.Stream || got.PolicyVersion != r.PolicyVersion || !got.CreatedAt.Equal(stageNow) {
				t.Errorf("ids not copied: %+v", got)
			}
			if got.Status != tt.want.status || got.Imputed != tt.want.imputed {
				t.Errorf("status %s imputed %v, want %s %v (reason %q)", got.Status, got.Imputed, tt.want.status, tt.want.imputed, got.Reason)
			}
			if (got.Score == nil) != (tt.want.score == nil) || (got.Score != nil && *got.Score != *tt.want.score) {
				t.Errorf("score %v, want %v", got.Score, tt.want.score)
			}
			if !strings.Contains(got.Reason, tt.want.reason) || len(got.Reason) > topics.MaxReasonLen {
				t.Errorf("reason %.80q… (%d bytes) does not contain %q", got.Reason, len(got.Reason), tt.want.reason)
			}
		})
	}
}

func TestHandlerBadRecord(t *testing.T) {
	exec, _ := NewBuiltinExecutor(behave, BuiltinConfig{})
	pool, _ := NewPool(exec, 1)
	h, err := NewHandler(HandlerConfig{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := h.Handle(context.Background(), &kgo.Record{Value: []byte("{not json")})
	if !errors.Is(err, topics.ErrMalformed) || outs != nil {
		t.Fatalf("Handle = %v, %v; want ErrMalformed", outs, err)
	}
	if topics.Reason(err) == "" {
		t.Error("no DLQ reason")
	}
}

// TestHandlerHandsBackOnShutdown: an execution interrupted by shutdown is not published; the
// handler returns the context's error so the runtime leaves the offset uncommitted.
func TestHandlerHandsBackOnShutdown(t *testing.T) {
	started := make(chan struct{})
	exec, _ := NewBuiltinExecutor(func(ctx context.Context, _ Job) (float64, error) {
		close(started)
		<-ctx.Done()
		return 0, ctx.Err()
	}, BuiltinConfig{Timeout: time.Minute})
	pool, _ := NewPool(exec, 1)
	h, _ := NewHandler(HandlerConfig{Pool: pool, Policy: PolicyZero})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		outs, err := h.Handle(ctx, encodeRollout(t, anchorRollout("x")))
		if outs != nil {
			err = errors.New("published a canceled execution")
		}
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %v, want context.Canceled", err)
	}
}

func TestNewHandlerConfig(t *testing.T) {
	exec, _ := NewBuiltinExecutor(behave, BuiltinConfig{})
	pool, _ := NewPool(exec, 1)
	tests := []struct {
		name string
		cfg  HandlerConfig
		want error
	}{
		{"nil pool", HandlerConfig{}, ErrConfig},
		{"bad policy", HandlerConfig{Pool: pool, Policy: Policy(7)}, ErrUnknownPolicy},
		{"bad artifact name", HandlerConfig{Pool: pool, ArtifactName: "../x"}, nil},
	}
	for _, tt := range tests {
		_, err := NewHandler(tt.cfg)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
}
