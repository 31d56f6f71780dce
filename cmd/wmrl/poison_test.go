package main

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
)

// The real `wmrl worldmodel` and `wmrl sandbox` processes on the real broker meet a 10 MB
// compressible rollout between two good ones: each dead-letters it without its value (reason
// too-large, source offset 1) and scores both good rollouts, and both exit cleanly on SIGTERM.
// (Before dead letters were bounded, the dead letter's produce failed and the stage stopped,
// and stopped again at the same offset after every restart.)
func TestPoisonRolloutStages(t *testing.T) {
	s := newRolloutStages(t, buildWMRL(t, t.TempDir()))
	names, count, dead := s.names, s.count, s.dead
	poison := testenv.PoisonJSON(`"schema":"wmrl.rollout.v1","run_id":"r"`, testenv.PoisonBytes)
	testenv.ProduceCompressed(t, s.brokers, s.rollout(0),
		&kgo.Record{Topic: names.Rollouts(), Key: []byte("r"), Value: poison}, s.rollout(1))
	procs := s.start()
	s.reader(90 * time.Second)(2)
	for _, stage := range []string{"worldmodel", "sandbox"} {
		d, ok := dead[stage]
		if !ok || d.Reason != "too-large" || d.SourceOffset != 1 || d.Value != nil || len(d.Omitted) != 1 || d.Omitted[0].Bytes != len(poison) {
			t.Errorf("%s dead letter %+v (omitted %+v)", stage, ok, d.Omitted)
		}
	}
	for _, p := range procs {
		p.terminate(30 * time.Second)
	}
	if count[names.Predicted()] != 2 || count[names.Executed()] != 2 || count[names.DLQ()] != 2 {
		t.Errorf("records per topic %v: want 2 predicted, 2 executed, 2 dead letters", count)
	}
}
