package producers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/consumers/worldmodel"
	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/topics"
)

const (
	pipeGroups, pipeG = 4, 4
	bigIndex          = 3 // step 0: this rollout's artifact is above the inline limit
	badRefIndex       = 2 // step 1: this rollout references a claim check that does not exist
	pipeFraction      = 0.5
)

// pipePolicy is a tiny deterministic test policy. Every artifact ends in the line
// {"score": 0.<j><i>}: the mock world model and the sandbox script both report that number, so
// each stage's output can be checked value by value.
type pipePolicy struct{ store *artifact.Store }

func (p pipePolicy) SampleStep(_ context.Context, step int64) ([]producers.GroupSpec, error) {
	out := make([]producers.GroupSpec, pipeGroups)
	for j := range out {
		out[j].Prompt = fmt.Sprintf("task %d", j)
		for i := range pipeG {
			art := scoreLine(j, i)
			switch {
			case step == 0 && i == bigIndex:
				art = strings.Repeat("# padding\n", 40) + art
			case step == 1 && i == badRefIndex:
				missing := artifact.Digest([]byte("never stored"))
				out[j].Rollouts = append(out[j].Rollouts, producers.RolloutSpec{
					ArtifactURI: "file://" + filepath.Join(p.store.Dir(), missing), ArtifactSHA256: missing,
				})
				continue
			}
			out[j].Rollouts = append(out[j].Rollouts, producers.RolloutSpec{Artifact: []byte(art)})
		}
	}
	return out, nil
}

func scoreLine(j, i int) string { return fmt.Sprintf(`{"score": 0.%d%d}`, j, i) }

var scoreRE = regexp.MustCompile(`\{"score": (0\.\d\d)\}`)

// lastScore is the builtin world model: the number in the artifact's score line.
func lastScore(_ context.Context, in worldmodel.Input) (float64, error) {
	m := scoreRE.FindAllSubmatch(in.Artifact, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("no score line in %q", in.Artifact)
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}

// openAIMock answers chat completions with the score line found in the prompt (the default
// template embeds the artifact), so a by-reference artifact scores right only if it was resolved.
func openAIMock(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		m := scoreRE.FindAllStringSubmatch(req.Messages[len(req.Messages)-1].Content, -1)
		reply := "I cannot tell"
		if len(m) > 0 {
			reply = fmt.Sprintf("```json\n{\"score\": %s}\n```", m[len(m)-1][1])
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": reply}, "finish_reason": "stop"}}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// pickRun returns a run id whose anchor choice exercises every case: an anchor and a
// non-anchor group in each step (the hash is fixed, so this is deterministic).
func pickRun(t *testing.T) string {
	for k := 0; k < 1000; k++ {
		run := "pipe-" + strconv.Itoa(k)
		ok := true
		for step := 0; step < 2; step++ {
			anchors := 0
			for j := range pipeGroups {
				if topics.IsAnchor(run, fmt.Sprintf("%d-%d", step, j), pipeFraction) {
					anchors++
				}
			}
			ok = ok && anchors > 0 && anchors < pipeGroups
		}
		if ok {
			return run
		}
	}
	t.Fatal("no run id with mixed anchors")
	return ""
}

// TestPipelineRealBroker runs generator → worldmodel → sandbox through the real broker and checks
// one record per rollout per stage: a predicted reward for every rollout, an executed reward for
// every anchor rollout and none for the others, claim-checked artifacts resolved (or invalid when
// unreachable), and a malformed record dead-lettered by both stages without stopping them.
func TestPipelineRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	for _, wm := range []string{"openai", "builtin"} {
		t.Run(wm, func(t *testing.T) { runPipeline(t, brokers, wm) })
	}
}

func runPipeline(t *testing.T, brokers []string, wm string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The stages check at start-up that their topics exist: Topics waits until the metadata shows
	// them all with their leaders (CreateTopics answers before every broker's metadata does).
	names := testenv.Topics(t, brokers, 3)
	prefix := names.Prefix
	seeds := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	admCl, err := kgo.NewClient(seeds...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := artifact.NewStore(filepath.Join(t.TempDir(), "claims"), 0)
	if err != nil {
		t.Fatal(err)
	}
	run := pickRun(t)

	// World model: the OpenAI client against a mock server, or the builtin scorer.
	var scorer worldmodel.Scorer
	if wm == "openai" {
		srv := openAIMock(t)
		if scorer, err = worldmodel.NewOpenAIScorer(worldmodel.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "mock", Timeout: 5 * time.Second, Logger: log}); err != nil {
			t.Fatal(err)
		}
	} else if scorer, err = worldmodel.NewBuiltinScorer(lastScore, 0, 1); err != nil {
		t.Fatal(err)
	}
	wmStage, err := worldmodel.NewStage(stage.Config{Names: names, Group: prefix + "wm", KafkaOpts: seeds, Logger: log, CommitInterval: 100 * time.Millisecond},
		worldmodel.HandlerConfig{Scorer: scorer, Concurrency: 4, Model: "mock", Artifacts: store})
	if err != nil {
		t.Fatal(err)
	}
	// Sandbox: a real command executor running a small shell script under rlimits.
	exec, err := sandbox.NewCommandExecutor(sandbox.CommandConfig{
		Argv:    []string{"/bin/sh", "-c", `echo "executing $1" >&2; tail -n 1 "$1"`, "sh", "{artifact}"},
		Timeout: 10 * time.Second,
		Config:  jail.Config{Limits: jail.Limits{CPUSeconds: 10, FileSizeBytes: 1 << 20}, TempDir: t.TempDir(), Logger: log, UseBwrap: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.NewPool(exec, 2, sandbox.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	sbStage, err := sandbox.NewStage(stage.Config{Names: names, Group: prefix + "sb", KafkaOpts: seeds, Logger: log, CommitInterval: 100 * time.Millisecond},
		sandbox.HandlerConfig{Pool: pool, Artifacts: store, ArtifactName: "solution.json"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	go func() { done <- wmStage.Run(runCtx) }()
	go func() { done <- sbStage.Run(runCtx) }()

	// Generator: step 0, a malformed record in the middle of the stream, step 1.
	backend, err := producers.NewBuiltin(pipePolicy{store: store}, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := producers.New(backend, producers.Config{RunID: run, AnchorFraction: pipeFraction, Names: names, KafkaOpts: seeds,
		InlineLimit: 100, Artifacts: store, PolicyVersion: "ckpt", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	publish := func() {
		b, err := backend.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gen.Publish(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	bad := &kgo.Record{Topic: names.Rollouts(), Key: []byte(run), Value: []byte(`{"schema": "wmrl.rollout.v1", "run_id": "` + run + `", "step": `)}
	if err := admCl.ProduceSync(ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	publish()

	// Expected outputs, from the manifests the generator published.
	anchorGroups := map[string]bool{}
	for step := 0; step < 2; step++ {
		for j := range pipeGroups {
			gid := fmt.Sprintf("%d-%d", step, j)
			anchorGroups[gid] = topics.IsAnchor(run, gid, pipeFraction)
		}
	}
	wantPredicted := 2 * pipeGroups * pipeG
	wantExecuted := 0
	for _, a := range anchorGroups {
		if a {
			wantExecuted += pipeG
		}
	}

	reader, err := kgo.NewClient(append(append([]kgo.Opt{}, seeds...),
		kgo.ConsumeTopics(names.Predicted(), names.Executed(), names.DLQ(), names.Steps()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	predicted := map[string][]topics.PredictedReward{}
	executed := map[string][]topics.ExecutedReward{}
	var dead []topics.DeadLetter
	manifests := 0
	count := func() int { return len(predicted) + len(executed) + len(dead) + manifests }
	want := wantPredicted + wantExecuted + 2 + 2
	// Read until everything expected arrived, then one more second to catch duplicates.
	var settle time.Time
	for ctx.Err() == nil && (settle.IsZero() || time.Now().Before(settle)) {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		f := reader.PollFetches(pctx)
		pcancel()
		f.EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case names.Predicted():
				p, err := topics.DecodePredicted(r.Value)
				if err != nil {
					t.Fatalf("predicted record: %v", err)
				}
				predicted[p.RolloutID] = append(predicted[p.RolloutID], p)
			case names.Executed():
				e, err := topics.DecodeExecuted(r.Value)
				if err != nil {
					t.Fatalf("executed record: %v", err)
				}
				executed[e.RolloutID] = append(executed[e.RolloutID], e)
			case names.DLQ():
				d, err := topics.ParseDeadLetter(r)
				if err != nil {
					t.Fatalf("dead letter: %v", err)
				}
				dead = append(dead, d)
			case names.Steps():
				manifests++
			}
		})
		if settle.IsZero() && count() >= want {
			settle = time.Now().Add(time.Second)
		}
	}
	stop()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("stage: %v", err)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("timed out: %d predicted (want %d), %d executed (want %d), %d dead letters (want 2)", len(predicted), wantPredicted, len(executed), wantExecuted, len(dead))
	}

	if len(predicted) != wantPredicted {
		t.Errorf("%d rollouts with a predicted reward, want %d", len(predicted), wantPredicted)
	}
	for id, ps := range predicted {
		if len(ps) != 1 {
			t.Errorf("rollout %s: %d predicted records, want exactly 1", id, len(ps))
			continue
		}
		p := ps[0]
		var step, j, i int
		fmt.Sscanf(id, "%d-%d-%d", &step, &j, &i)
		if p.Anchor != anchorGroups[p.GroupID] || p.PolicyVersion != "ckpt" || p.RunID != run {
			t.Errorf("%s: labels %+v", id, p)
		}
		if step == 1 && i == badRefIndex {
			if p.Status != topics.StatusInvalid || !strings.Contains(p.Reason, "not found") {
				t.Errorf("%s: unreachable artifact gave %s %q, want invalid/not found", id, p.Status, p.Reason)
			}
			continue
		}
		want, _ := strconv.ParseFloat(fmt.Sprintf("0.%d%d", j, i), 64)
		if p.Status != topics.StatusOK || p.Score == nil || *p.Score != want {
			t.Errorf("%s: predicted %s %v %q, want ok %v", id, p.Status, p.Score, p.Reason, want)
		}
	}
	if len(executed) != wantExecuted {
		t.Errorf("%d rollouts with an executed reward, want %d (anchor rollouts only)", len(executed), wantExecuted)
	}
	for id, es := range executed {
		e := es[0]
		if len(es) != 1 {
			t.Errorf("rollout %s: %d executed records, want exactly 1", id, len(es))
		}
		if !anchorGroups[e.GroupID] {
			t.Errorf("%s: executed although group %s is not an anchor", id, e.GroupID)
		}
		var step, j, i int
		fmt.Sscanf(id, "%d-%d-%d", &step, &j, &i)
		if step == 1 && i == badRefIndex {
			if e.Status != topics.StatusInvalid || !strings.Contains(e.Reason, "not found") || e.Score != nil {
				t.Errorf("%s: unreachable artifact gave %s %q", id, e.Status, e.Reason)
			}
			continue
		}
		want, _ := strconv.ParseFloat(fmt.Sprintf("0.%d%d", j, i), 64)
		if e.Status != topics.StatusOK || e.Score == nil || *e.Score != want || !strings.Contains(e.StderrTail, "executing") {
			t.Errorf("%s: executed %s %v %q (stderr %q), want ok %v", id, e.Status, e.Score, e.Reason, e.StderrTail, want)
		}
	}
	stages := map[string]bool{}
	for _, d := range dead {
		stages[d.Stage] = true
		if !strings.HasPrefix(d.Reason, "malformed") || d.SourceTopic != names.Rollouts() || string(d.Value) != string(bad.Value) {
			t.Errorf("dead letter %+v", d)
		}
	}
	if len(dead) != 2 || !stages[worldmodel.StageName] || !stages[sandbox.StageName] {
		t.Errorf("dead letters from %v (%d), want one each from worldmodel and sandbox", stages, len(dead))
	}

	// Both groups committed the whole topic: the malformed record and the skipped non-anchor
	// rollouts are consumed and committed, not left behind.
	ends, err := adm.ListEndOffsets(context.Background(), names.Rollouts())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{prefix + "wm", prefix + "sb"} {
		offs, err := adm.FetchOffsets(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(lo kadm.ListedOffset) {
			c, ok := offs.Lookup(lo.Topic, lo.Partition)
			if lo.Offset > 0 && (!ok || c.At != lo.Offset) {
				t.Errorf("group %s partition %d: committed %v, end %d", g, lo.Partition, c.At, lo.Offset)
			}
		})
	}
}
