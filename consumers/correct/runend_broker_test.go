package correct

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker: of three runs, two end (one with a late manifest after its end). Every
// step is sealed exactly once with the reference digest, wmrl_correct_active_runs returns to the
// one live run, the ended runs' per-run series are gone, the late manifest is dead-lettered with
// reason run_ended, and a replay of an ended run from the input topics gives its live digest.
func TestConsumerRunEndsOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	wl := SynthConfig{Runs: 3, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 2, Seed: 13, RunPrefix: "e"}
	recs := flatten(synthOn(t, names, wl))
	end := func(run string, last int64) *kgo.Record {
		r := endRecord(t, run, last)
		r.Topic = names.Steps()
		return r
	}
	lateManifest := manifestRecord(t, "e-0", 4, 2, 2)
	lateManifest.Topic = names.Steps()
	last := int64(wl.Steps - 1)
	input := append(recs, end("e-0", last), end("e-1", last), lateManifest)
	testenv.Produce(t, seeds, input)
	cc := smallCorrection()
	want := referenceRows(t, cc, retopic(recs, names))
	total := rollouts(wl)

	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.Registry = prometheus.NewRegistry()
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, total, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil) != 1 ||
		metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("active runs %v, run_ended dead letters %v; want 1 and 1",
				metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil),
				metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for run, n := range map[string]float64{"e-0": 0, "e-1": 0, "e-2": float64(wl.Streams)} {
		// masked_share is set after the commit, for the steps just sealed: a retired run's
		// series must not come back with its last step.
		for _, name := range []string{"wmrl_correct_sealed_step", "wmrl_correct_masked_share"} {
			if got := seriesOf(t, cfg.Registry, name, run); got != n {
				t.Errorf("run %s: %v %s series, want %v", run, got, name, n)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkLive(t, rd.rows, total, topics.DigestRows(want))

	res := replayRun(t, seeds, names, "e-0", cc)
	if w := topics.DigestRows(rowsOfRun(rd.rows, "e-0")); res.Digest != w || res.DeadLetters != 1 || res.Incomplete != 0 {
		t.Fatalf("replay of the ended run: %+v; want digest %s, 1 dead letter, nothing incomplete", res, w)
	}
}

// seriesOf counts the series of metric name labelled run.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name, run string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "run" && l.GetValue() == run {
					n++
				}
			}
		}
	}
	return n
}
