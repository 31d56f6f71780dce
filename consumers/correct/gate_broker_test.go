package correct

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker, --trust-gate: run "tgu-0"'s world model scores independently of the truth,
// run "tgi-0"'s is informative. Once the window holds enough anchor pairs the uninformative run's
// gate closes: its published world-model rows are masked (mask false, weight 0, advantage 0) while
// its anchor rows carry the steps; the informative run's gate never closes. Each step's gate, as
// recorded in its calibration snapshot, is recomputed here from the published anchor rows of the
// steps before it (the window), independently of the correction package. The gauges report the
// last step's gate, the live digest is the reference one, the replay with the gate reproduces the
// live digest of each run, and a replay without the gate is refused naming --trust-gate.
func TestTrustGateOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	base := SynthConfig{Runs: 1, Steps: 10, Groups: 6, GroupSize: 4, AnchorEvery: 2, Streams: 1, Seed: 39}
	unin, info := base, base
	unin.RunPrefix, unin.Uninformative = "tgu", true
	info.RunPrefix = "tgi"
	recs := append(flatten(synthOn(t, names, unin)), flatten(synthOn(t, names, info))...)
	testenv.Produce(t, seeds, recs)
	cc := smallCorrection()
	cc.TrustGate = true
	want := referenceRows(t, cc, retopic(recs, names))
	total := rollouts(unin) + rollouts(info)

	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.Registry = prometheus.NewRegistry()
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, total, 60*time.Second)
	lastStep := float64(base.Steps - 1)
	deadline := time.Now().Add(30 * time.Second)
	for metricSum(t, cfg.Registry, "wmrl_correct_sealed_step", map[string]string{"run": "tgi-0"}) != lastStep ||
		metricSum(t, cfg.Registry, "wmrl_correct_sealed_step", map[string]string{"run": "tgu-0"}) != lastStep {
		if time.Now().After(deadline) {
			t.Fatal("the gauges never reached the last step")
		}
		time.Sleep(100 * time.Millisecond)
	}
	gauges := map[string][2]float64{}
	for _, run := range []string{"tgu-0", "tgi-0"} {
		l := map[string]string{"run": run}
		gauges[run] = [2]float64{metricSum(t, cfg.Registry, "wmrl_correct_trust_gate_closed", l), metricSum(t, cfg.Registry, "wmrl_correct_trust_gate_rho", l)}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkLive(t, rd.rows, total, topics.DigestRows(want))

	// The gate of every step, as the snapshots record it.
	gates := map[string]map[int64]topics.TrustGate{}
	for _, r := range readTopic(t, seeds, names.Calibration()) {
		if r.Value == nil || topics.IsCalibrationChunk(r) || topics.IsCalibrationEnd(r) {
			continue
		}
		sn, err := topics.DecodeCalibrationRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if sn.Gate == nil {
			t.Fatalf("run %s step %d: snapshot without the gate", sn.RunID, sn.Step)
		}
		if gates[sn.RunID] == nil {
			gates[sn.RunID] = map[int64]topics.TrustGate{}
		}
		gates[sn.RunID][sn.Step] = *sn.Gate
	}
	for _, run := range []string{"tgu-0", "tgi-0"} {
		rows := rowsOfRun(rd.rows, run)
		var xs, ys []float64 // the window: anchor pairs of the steps before
		closed := 0
		for v := int64(0); v < int64(base.Steps); v++ {
			g, ok := gates[run][v]
			if !ok {
				t.Fatalf("run %s step %d: no snapshot", run, v)
			}
			rho := pearson(xs, ys)
			n := len(xs)
			wantClosed := n >= 10 && rho < 1/math.Sqrt(float64(n-2))
			if g.Pairs != n || g.Closed != wantClosed || math.Abs(g.Rho-rho) > 1e-9 {
				t.Fatalf("run %s step %d: gate %+v; the window's %d pairs give rho %v, closed %v", run, v, g, n, rho, wantClosed)
			}
			if g.Closed {
				closed++
			}
			for _, r := range rows {
				if r.Step != v {
					continue
				}
				switch {
				case r.Source == topics.SourceWorldModel && g.Closed:
					if r.Mask || r.Weight != 0 || r.Advantage != 0 {
						t.Fatalf("run %s step %d: world-model row %s not masked by the closed gate: %+v", run, v, r.RolloutID, r)
					}
				case r.Source == topics.SourceWorldModel:
					if !r.Mask || r.Weight != 1 {
						t.Fatalf("run %s step %d: world-model row %s masked with the gate open: %+v", run, v, r.RolloutID, r)
					}
				case r.Source == topics.SourceAnchor:
					if !r.Mask || r.Weight < 1 {
						t.Fatalf("run %s step %d: anchor row %s does not carry the step: %+v", run, v, r.RolloutID, r)
					}
				}
			}
			for _, r := range rows {
				if r.Step == v && r.Source == topics.SourceAnchor && r.PredictedOK && r.ExecutedOK {
					xs, ys = append(xs, r.Predicted), append(ys, r.Executed)
				}
			}
		}
		last := gates[run][int64(base.Steps-1)]
		wantGauge := [2]float64{0, last.Rho}
		if last.Closed {
			wantGauge[0] = 1
		}
		if gauges[run] != wantGauge {
			t.Errorf("run %s: gauges closed, rho %v; the last snapshot's gate %+v", run, gauges[run], last)
		}
		switch run {
		case "tgu-0":
			// 9 steps see a window of 12+ pairs; about 84% of independent windows close (correction's TestGateCalibration).
			if closed < 5 {
				t.Errorf("uninformative run: gate closed in %d of %d steps", closed, base.Steps)
			}
		case "tgi-0":
			if closed != 0 {
				t.Errorf("informative run: gate closed in %d steps", closed)
			}
		}
		t.Logf("run %s: gate closed in %d of %d steps; last %+v", run, closed, base.Steps, last)

		res := replayRun(t, seeds, names, run, cc)
		if w := topics.DigestRows(rows); res.Digest != w || res.Incomplete != 0 {
			t.Fatalf("replay of %s with the gate: %+v, want digest %s", run, res, w)
		}
	}
	off := cc
	off.TrustGate = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Replay(ctx, ReplayConfig{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Run: "tgu-0",
		Correction: off, Logger: quietLogger()}, func(int64, []topics.AdvantageRow) error { return nil })
	if !errors.Is(err, ErrSettingsChanged) || !strings.Contains(err.Error(), "--trust-gate") {
		t.Fatalf("replay without the gate: %v, want %v naming --trust-gate", err, ErrSettingsChanged)
	}
}

// pearson is the sample correlation of xs and ys, 0 when either is constant or there are no
// pairs: the definition of docs/anchors.md, written out again for the test.
func pearson(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n == 0 {
		return 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, syy, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		syy += (ys[i] - my) * (ys[i] - my)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx/n < 1e-12 || syy/n < 1e-12 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}
