package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker: `wmrl generate` publishes the end-of-run request naming its last step on the
// run-control topic when its input ends, `wmrl runs end RUN --last-step N --wait 0` publishes one
// for N there, and without --last-step
// a run that Redis holds no state of is refused with a message naming the flag.
func TestRunsEndOnBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{}) })
	dir := t.TempDir()
	h := &e2eHarness{t: t, bin: buildWMRL(t, dir), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix,
	}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")

	var rollouts []e2eRollout
	for s := int64(0); s < 2; s++ {
		for i := 0; i < 2; i++ {
			gid := fmt.Sprintf("%d-g", s)
			rollouts = append(rollouts, e2eRollout{id: fmt.Sprintf("%s-%d", gid, i), group: gid, step: s, wm: "0.5", exec: "0.5"})
		}
	}
	input := filepath.Join(dir, "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)
	if out := h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", input, "--run", "gen"); !strings.Contains(out, "run gen ended after step 1") {
		t.Fatalf("generate printed %q", out)
	}
	if out := h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", input, "--run", "open", "--end-run=false"); strings.Contains(out, "ended") {
		t.Fatalf("generate --end-run=false printed %q", out)
	}
	// No correct runs here: --wait 0 publishes the request without waiting for its verdict
	// (TestOperationsAreAcknowledged waits for correct's).
	if out := h.run(time.Minute, 0, "runs", "end", "cli", "--last-step", "7", "--wait", "0"); !strings.Contains(out, "end of run cli after step 7 requested") {
		t.Fatalf("runs end printed %q", out)
	}
	_, errOut, code := h.try(time.Minute, "runs", "end", "unknown", "--redis-prefix", unique)
	if code == 0 || !strings.Contains(errOut, "no sealed step in Redis") || !strings.Contains(errOut, "--last-step") {
		t.Fatalf("runs end without state: exit %d, stderr %q", code, errOut)
	}

	// A run 'wmrl correct' sealed up to step 2 (its state written to Redis as the consumer
	// writes it): runs list shows it, and runs end without --last-step ends it there.
	seedRedisRun(t, redisURL, unique, "sealed", 2)
	if out := h.run(time.Minute, 0, "runs", "list", "--redis-prefix", unique); !regexp.MustCompile(`(?m)^sealed\s+active\s+2\s+s\s`).MatchString(out) {
		t.Fatalf("runs list printed %q", out)
	}
	if out := h.run(time.Minute, 0, "runs", "end", "sealed", "--redis-prefix", unique, "--wait", "0"); !strings.Contains(out, "end of run sealed after step 2 requested") {
		t.Fatalf("runs end from Redis printed %q", out)
	}

	// The ends are requests on the run-control topic ('wmrl correct' relays them onto the steps
	// topic); the steps topic holds the manifests alone.
	ends := map[string]int64{}
	manifests := map[string]int{}
	for _, r := range append(readSteps(t, brokers, names.Steps(), 2+2), readSteps(t, brokers, names.Runs(), 1+1+1)...) {
		m, err := topics.DecodeStep(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.EndOfRun && r.Topic == names.Runs() && string(r.Key) == m.RunID:
			ends[m.RunID] = m.Step
		case m.EndOfRun:
			t.Errorf("end-of-run record of run %s on %s (key %q), want it on %s keyed by the run", m.RunID, r.Topic, r.Key, names.Runs())
		default:
			manifests[m.RunID]++
		}
	}
	if want := map[string]int64{"gen": 1, "cli": 7, "sealed": 2}; fmt.Sprint(ends) != fmt.Sprint(want) {
		t.Fatalf("end-of-run records %v, want %v", ends, want)
	}
	if manifests["gen"] != 2 || manifests["open"] != 2 {
		t.Fatalf("manifests %v", manifests)
	}
}

// readSteps reads n records of topic from its start.
func readSteps(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), n, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// seedRedisRun writes the state of (run, "s") sealed after empty steps 0..last under prefix, as
// 'wmrl correct' writes it.
func seedRedisRun(t *testing.T, redisURL, prefix, run string, last int64) {
	t.Helper()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c, err := correction.New(correction.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := c.NewState(run, "s")
	for v := int64(0); v <= last; v++ {
		if _, err := c.Advance(st, correction.Step{Run: run, Stream: "s", Step: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	d := st.Digest()
	sn := &topics.CalibrationSnapshot{RunID: run, Stream: "s", Step: st.SealedStep(), State: st.EncodeHead(),
		Digest: hex.EncodeToString(d[:]), FitVersion: st.FitVersion(), Pairs: st.Pairs()}
	w := statestore.Write{Snap: sn, Chunks: statestore.WindowChunks(st, 0), State: st, Full: true}
	if _, err := statestore.New(rdb, prefix, 3).Write(context.Background(), []statestore.Write{w}, map[string][]string{run: {"s"}}); err != nil {
		t.Fatal(err)
	}
}
