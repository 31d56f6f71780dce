package correction

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gateWindow is a window of the given pairs (weight 1 unless ws is given).
func gateWindow(xs, ys, ws []float64) *fifo {
	var f fifo
	for i := range xs {
		w := 1.0
		if ws != nil {
			w = ws[i]
		}
		f.push(pair{xs[i], ys[i], w})
	}
	return &f
}

// gatePairs draws n pairs (x, y) with x uniform and y = slope·x + noise·N(0,1).
func gatePairs(seed uint64, n int, slope, noise float64) (xs, ys []float64) {
	r := rand.New(rand.NewPCG(seed, 39))
	for range n {
		x := r.Float64()
		xs = append(xs, x)
		ys = append(ys, slope*x+noise*r.NormFloat64())
	}
	return xs, ys
}

func TestGateDecision(t *testing.T) {
	indepX, indepY := gatePairs(1, 2000, 0, 1)
	advX, advY := gatePairs(2, 200, -1, 0.15)
	lineX, _ := gatePairs(3, 50, 0, 0)
	small := func(n int) []float64 { return lineX[:n] }
	neg := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = 1 - x
		}
		return out
	}
	constant := func(n int, v float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		closed bool
		rho    float64 // checked when !NaN
	}{
		{"empty window open", nil, nil, false, 0},
		{"n<10 open even when perfectly backwards", small(9), neg(small(9)), false, -1},
		{"n=10 perfectly backwards closed", small(10), neg(small(10)), true, -1},
		{"perfectly correlated open", lineX, lineX, false, 1},
		{"independent noise closed", indepX, indepY, true, math.NaN()},
		{"adversarial judge closed", advX, advY, true, math.NaN()},
		{"constant world model closed", constant(20, 0.5), small(20), true, 0},
		{"constant truth closed", small(20), constant(20, 1), true, 0},
		{"constant truth n<10 open", small(9), constant(9, 1), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gateOf(gateWindow(tc.xs, tc.ys, nil))
			if g.N != len(tc.xs) || g.Closed != tc.closed {
				t.Fatalf("gate %+v, want n %d closed %v", g, len(tc.xs), tc.closed)
			}
			if !math.IsNaN(tc.rho) && math.Abs(g.Rho-tc.rho) > 1e-12 {
				t.Fatalf("rho %v, want %v", g.Rho, tc.rho)
			}
			if g.N >= MinGatePairs && g.Threshold != 1/math.Sqrt(float64(g.N-2)) {
				t.Fatalf("threshold %v for n %d", g.Threshold, g.N)
			}
			if !(g.Lo <= g.Rho && g.Rho <= g.Hi) {
				t.Fatalf("interval [%v, %v] does not hold rho %v", g.Lo, g.Hi, g.Rho)
			}
		})
	}
}

// TestGateFisherInterval checks the interval against numbers computed independently (Python's
// math.tanh/atanh): ρ̂ = 0.5 exactly at n = 103 gives se = 0.1.
func TestGateFisherInterval(t *testing.T) {
	// y = x + e with e orthogonal to x and var(e) = 3·var(x) gives ρ = 0.5 exactly: build it.
	n := 103
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range n {
		xs[i] = float64(i%2)*2 - 1 // ±1
		e := float64((i/2)%2)*2 - 1
		if i == n-1 {
			xs[i], e = 0, 0
		}
		ys[i] = xs[i] + math.Sqrt(3)*e
	}
	g := gateOf(gateWindow(xs, ys, nil))
	if math.Abs(g.Rho-0.5) > 0.01 {
		t.Fatalf("construction: rho %v, want ≈ 0.5", g.Rho)
	}
	z, se := math.Atanh(g.Rho), 0.1
	wantLo, wantHi := math.Tanh(z-1.959963984540054*se), math.Tanh(z+1.959963984540054*se)
	if math.Abs(g.Lo-wantLo) > 1e-12 || math.Abs(g.Hi-wantHi) > 1e-12 {
		t.Fatalf("interval [%v, %v], want [%v, %v]", g.Lo, g.Hi, wantLo, wantHi)
	}
	// At ρ̂ = 0.5 exactly: [0.33930752, 0.63233815] (Python).
	lo, hi := math.Tanh(math.Atanh(0.5)-1.959963984540054*0.1), math.Tanh(math.Atanh(0.5)+1.959963984540054*0.1)
	if math.Abs(lo-0.3393075224832535) > 1e-12 || math.Abs(hi-0.6323381504876256) > 1e-12 {
		t.Fatalf("Fisher interval at 0.5, n 103: [%v, %v]", lo, hi)
	}
}

// TestGateCalibration: under independence the gate closes in about Φ(1) ≈ 84% of windows (ρ̂ is
// ≈ N(0, 1/(n−2)) and the threshold is one standard error), and under a real correlation of 0.5
// it stays open in every window; 400 seeded windows of 500 pairs each.
func TestGateCalibration(t *testing.T) {
	const trials, n = 400, 500
	var closedIndep, closedInformative int
	for s := range uint64(trials) {
		xs, ys := gatePairs(100+s, n, 0, 1)
		if gateOf(gateWindow(xs, ys, nil)).Closed {
			closedIndep++
		}
		// slope 1, x uniform (var 1/12), noise var 3/12: ρ = 0.5.
		xs, ys = gatePairs(1000+s, n, 1, math.Sqrt(3.0/12))
		if gateOf(gateWindow(xs, ys, nil)).Closed {
			closedInformative++
		}
	}
	if f := float64(closedIndep) / trials; f < 0.78 || f > 0.90 {
		t.Errorf("independent: closed in %.3f of windows, want ≈ 0.84", f)
	}
	if closedInformative != 0 {
		t.Errorf("informative (ρ = 0.5): closed in %d of %d windows", closedInformative, trials)
	}
}

// TestGateWeighted: a pair of weight 2 counts as that pair twice (weighted Pearson), and the
// weighted ρ̂ recovers the population's correlation where the chosen sample's differs.
func TestGateWeighted(t *testing.T) {
	xs, ys := gatePairs(5, 60, 0.3, 0.2)
	ws := make([]float64, len(xs))
	var dx, dy []float64
	for i := range xs {
		ws[i] = float64(1 + i%3)
		for range int(ws[i]) {
			dx, dy = append(dx, xs[i]), append(dy, ys[i])
		}
	}
	w := gateOf(gateWindow(xs, ys, ws))
	d := gateOf(gateWindow(dx, dy, nil))
	if math.Abs(w.Rho-d.Rho) > 1e-12 {
		t.Fatalf("weighted rho %v, duplicated rho %v", w.Rho, d.Rho)
	}
	if w.N != len(xs) {
		t.Fatalf("n %d, want the pair count %d", w.N, len(xs))
	}
}

// gateSteps is a run whose world model is informative (predicted = executed + small noise) or
// not (predicted independent of executed); groups g0, g1 are anchors.
func gateSteps(seed uint64, steps int, informative bool) []Step {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]Step, steps)
	for v := range out {
		st := Step{Run: "run", Stream: "s", Step: int64(v), Groups: make([]Group, 8)}
		for g := range st.Groups {
			grp := Group{ID: fmt.Sprintf("g%d", g), Anchor: g < 2, Rollouts: make([]Rollout, 8)}
			for k := range grp.Rollouts {
				t := r.Float64()
				p := r.Float64()
				if informative {
					p = min(max(t+0.05*r.NormFloat64(), 0), 1)
				}
				grp.Rollouts[k] = Rollout{ID: fmt.Sprintf("r%d", k), Predicted: Reward{p, true}, Executed: Reward{t, true}}
			}
			st.Groups[g] = grp
		}
		out[v] = st
	}
	return out
}

// TestTrustGateInCorrect: with the gate on and an uninformative world model, every step after
// the first (whose window is empty) masks the world-model rows and leaves the anchor rows and
// the state exactly as without the gate; with an informative one, the gate on changes nothing.
func TestTrustGateInCorrect(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(), func() Config { c := DefaultConfig(); c.Map = MapZSpace; return c }()} {
		on := cfg
		on.TrustGate = true
		if on.Hash() != cfg.Hash() {
			t.Fatal("TrustGate changed the config hash: states would differ by a setting that never changes them")
		}
		t.Run(cfg.Map.String(), func(t *testing.T) {
			for _, informative := range []bool{false, true} {
				steps := gateSteps(11, 30, informative)
				offRows, offSt := run(t, mustNew(t, cfg), steps)
				cOn := mustNew(t, on)
				st := cOn.NewState("run", "s")
				closedSteps := 0
				for i, s := range steps {
					gate := st.Gate()
					rows, next, err := cOn.Correct(st, s)
					if err != nil {
						t.Fatal(err)
					}
					if gate.Closed {
						closedSteps++
					}
					for k, r := range rows {
						want := offRows[i][k]
						if gate.Closed && r.Source == SourceWorldModel {
							if r.Mask || r.Weight != 0 || r.Advantage != 0 || r.Used != 0 || !r.Gated ||
								r.Calibrated != want.Calibrated || r.Predicted != want.Predicted {
								t.Fatalf("step %d row %s/%s: gated row %+v", i, r.GroupID, r.RolloutID, r)
							}
							continue
						}
						if r != want {
							t.Fatalf("step %d row %s/%s (gate %v): %+v, gate off %+v", i, r.GroupID, r.RolloutID, gate, r, want)
						}
					}
					st = next
				}
				if st.Digest() != offSt.Digest() {
					t.Fatal("the gate changed the state")
				}
				switch {
				case informative && closedSteps != 0:
					t.Fatalf("informative world model: gate closed in %d steps", closedSteps)
				case !informative && closedSteps < len(steps)/2: // ≈ 84% expected (TestGateCalibration)
					t.Fatalf("uninformative world model: gate closed in %d of %d steps", closedSteps, len(steps))
				}
			}
		})
	}
}

func TestTrustGateConfig(t *testing.T) {
	ref := ReferenceConfig()
	ref.TrustGate = true
	if _, err := New(ref); err == nil {
		t.Fatal("reference mode accepted the trust gate")
	}
	// Off by default: the existing goldens and digests run with it off.
	if DefaultConfig().TrustGate || ReferenceConfig().TrustGate {
		t.Fatal("trust gate on by default")
	}
	if !slices.Equal([]string{Gate{}.String(), Gate{Closed: true}.String()}, []string{"open", "closed"}) {
		t.Fatal("gate names")
	}
}
