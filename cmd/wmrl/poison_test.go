package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// The real `wmrl worldmodel` and `wmrl sandbox` processes on the real broker meet a 10 MB
// compressible rollout between two good ones: each dead-letters it without its value (reason
// too-large, source offset 1) and scores both good rollouts, and both exit cleanly on SIGTERM.
// (Before dead letters were bounded, the dead letter's produce failed and the stage stopped,
// and stopped again at the same offset after every restart.)
func TestPoisonRolloutStages(t *testing.T) {
	brokers := testenv.Kafka(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	groups := map[string]string{"worldmodel": unique + "-worldmodel", "sandbox": unique + "-sandbox"}
	redisURL := testenv.Redis(t)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, groups) })
	h := &e2eHarness{t: t, bin: buildWMRL(t, t.TempDir()), global: []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")

	rollout := func(i int) *kgo.Record {
		r := topics.Rollout{RolloutRef: topics.RolloutRef{RunID: "r", Step: 0, GroupID: "0-q", RolloutID: fmt.Sprintf("0-q-%d", i), Stream: "main", PolicyVersion: "v"},
			Anchor: true, Index: i, Artifact: fmt.Sprintf(`{"rollout":"%d","wm":0.5,"exec":0.7}`, i),
			CreatedAt: time.Unix(1_700_000_000, 0).UTC()}
		rec, err := names.RolloutRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	poison := testenv.PoisonJSON(`"schema":"wmrl.rollout.v1","run_id":"r"`, testenv.PoisonBytes)
	testenv.ProduceCompressed(t, brokers, rollout(0),
		&kgo.Record{Topic: names.Rollouts(), Key: []byte("r"), Value: poison}, rollout(1))

	wm := httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(wm.Close)
	argv := e2eScoreArgv(t)
	wmProc := h.start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", wm.URL+"/v1", "--model", "m",
		"--metrics-addr", "127.0.0.1:0", "--group", groups["worldmodel"])
	sbProc := h.start("sandbox", "sandbox", "--single-step-no-private", "--argv", argv, "--slots", "1", "--timeout", "10s",
		"--metrics-addr", "127.0.0.1:0", "--group", groups["sandbox"])

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Predicted(), names.Executed(), names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	count := map[string]int{}
	dead := map[string]topics.DeadLetter{}
	for count[names.Predicted()] < 2 || count[names.Executed()] < 2 || len(dead) < 2 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("outputs %v, dead letters from %d stages: a stage stalled", count, len(dead))
		}
		fs.EachRecord(func(r *kgo.Record) {
			count[r.Topic]++
			if r.Topic != names.DLQ() {
				return
			}
			d, err := topics.ParseDeadLetter(r)
			if err != nil {
				t.Fatal(err)
			}
			dead[d.Stage] = d
		})
	}
	for _, stage := range []string{"worldmodel", "sandbox"} {
		d, ok := dead[stage]
		if !ok || d.Reason != "too-large" || d.SourceOffset != 1 || d.Value != nil || len(d.Omitted) != 1 || d.Omitted[0].Bytes != len(poison) {
			t.Errorf("%s dead letter %+v (omitted %+v)", stage, ok, d.Omitted)
		}
	}
	for _, p := range []*e2eProc{wmProc, sbProc} {
		p.terminate(30 * time.Second)
	}
	if count[names.Predicted()] != 2 || count[names.Executed()] != 2 || count[names.DLQ()] != 2 {
		t.Errorf("records per topic %v: want 2 predicted, 2 executed, 2 dead letters", count)
	}
}
