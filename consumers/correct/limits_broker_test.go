package correct

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// waitGauges polls the consumer's buffered-steps and held-dead-letters gauges until they read
// steps and held.
func waitGauges(t *testing.T, reg prometheus.Gatherer, steps, held float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b := metricSum(t, reg, "wmrl_correct_buffered_steps", nil)
		h := metricSum(t, reg, "wmrl_correct_dead_letters_held", nil)
		if b == steps && h == held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("buffered steps %v, held dead letters %v; want %v and %v", b, h, steps, held)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On the real broker: a run whose step 0 never arrives sends manifests for steps 1 to 8 next to
// two good runs. With --max-pending-steps-per-run 4 the consumer buffers steps 1-3, refuses 4-8
// (their dead letters wait behind the stuck step's offsets) and seals every good step exactly once
// with the clean digest; a restarted consumer, which reads the inputs again from the committed
// offsets, holds exactly as much and writes nothing twice.
func TestConsumerLimitsOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	wl := SynthConfig{Runs: 2, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 1, Seed: 9, RunPrefix: "r"}
	good := flatten(synthOn(t, names, wl))
	var hostile []*kgo.Record
	for v := int64(1); v <= 8; v++ {
		r := manifestRecord(t, "h", v, 2, 2)
		r.Topic = names.Steps()
		hostile = append(hostile, r)
	}
	testenv.Produce(t, seeds, append(hostile, good...))
	cc := smallCorrection()
	want := topics.DigestRows(referenceRows(t, cc, retopic(good, names)))
	total := rollouts(wl)

	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.Limits = Limits{PendingStepsPerRun: 4}
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	for round := 1; round <= 2; round++ {
		cfg.Registry = prometheus.NewRegistry()
		stop := startConsumer(t, cfg)
		rd.readUntil(t, total, 30*time.Second)
		waitGauges(t, cfg.Registry, 3, 5)
		refused := metricSum(t, cfg.Registry, "wmrl_correct_records_total", map[string]string{"result": resultDLQ})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		rd.readUntil(t, total+1, 1500*time.Millisecond)
		checkExactlyOnce(t, rd.rows, total)
		if got := topics.DigestRows(rd.rows); got != want {
			t.Fatalf("round %d: digest %s, want %s", round, got, want)
		}
		if refused != 5 {
			t.Errorf("round %d: %v records judged dead letters, want the 5 manifests beyond the limit", round, refused)
		}
	}
}
