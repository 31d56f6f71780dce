package correction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// ipwStep is one step of groups whose truth has a group effect δ_g = ±0.15 at every world-model
// score, y = 0.3 + 0.4·x + δ_g + noise, x on five levels. A group is an anchor with probability
// π_g = 0.8 when its observable proxy q_g (δ_g seen through noise, like the spread of a world
// model's samples) is positive and 0.2 otherwise: a choice on a group-level quantity correlated
// with the truth at a given x. weighted sets Weight = 1/π_g; otherwise the pairs enter unweighted.
func ipwStep(r *splitMix64, groups, size int, weighted bool) Step {
	s := Step{Run: "run", Stream: "s"}
	for g := range groups {
		delta := 0.15
		if r.u() < 0.5 {
			delta = -0.15
		}
		pi := 0.2
		if delta+0.1*(r.u()-0.5) > 0 {
			pi = 0.8
		}
		grp := Group{ID: fmt.Sprintf("g%04d", g), Anchor: r.u() < pi}
		if weighted {
			grp.Weight = 1 / pi
		}
		for i := range size {
			x := float64(r.next()%5) / 4
			y := 0.3 + 0.4*x + delta + 0.1*(r.u()-0.5)
			grp.Rollouts = append(grp.Rollouts, Rollout{
				ID:        fmt.Sprintf("r%d", i),
				Predicted: Reward{Score: x, OK: true},
				Executed:  Reward{Score: y, OK: true},
			})
		}
		s.Groups = append(s.Groups, grp)
	}
	return s
}

// TestWeightedFitUnbiased is the unbiasedness test of docs/anchors.md ("What counts as a win"):
// over repeated draws of a window chosen as ipwStep chooses, the inverse-propensity weighted fit's
// mean error against the truth E[y | x] = 0.3 + 0.4·x is within its standard error of 0, and the
// unweighted fit's is not (it sits near E[δ | chosen] ≈ +0.09). Both draw the same windows
// (same seed): only the weights differ. The windows are the default window's size (≈5000 pairs):
// a block's value is a ratio Σw·y/Σw, whose bias shrinks as 1/n, and at ≈1000 pairs per window
// (400 groups × 5) it was visible over 200 draws (+0.0028 ± 0.0009, 3% of the unweighted bias).
func TestWeightedFitUnbiased(t *testing.T) {
	const draws, groups, size = 100, 1250, 8
	for _, m := range []MapKind{MapIsotonic, MapCentred} {
		for _, tc := range []struct {
			name     string
			weighted bool
		}{{"weighted", true}, {"unweighted", false}} {
			t.Run(fmt.Sprintf("%v/%s", m, tc.name), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.MinPairs, cfg.Denoise, cfg.Map = 2, false, m
				c := mustNew(t, cfg)
				r := &splitMix64{s: 39}
				errs := make([]float64, draws)
				for d := range errs {
					_, st, err := c.Correct(c.NewState("run", "s"), ipwStep(r, groups, size, tc.weighted))
					if err != nil {
						t.Fatal(err)
					}
					if st.FitVersion() == 0 {
						t.Fatalf("draw %d: no fit (%d pairs)", d, st.Pairs())
					}
					for k := range 5 {
						x := float64(k) / 4
						errs[d] += (st.Calibrate(x) - (0.3 + 0.4*x)) / 5
					}
				}
				mean, se := meanSE(errs)
				t.Logf("mean error %.5f ± %.5f (SE over %d draws)", mean, se, draws)
				if within := math.Abs(mean) <= se; within != tc.weighted {
					t.Errorf("mean error %.5f, SE %.5f: within one SE of 0 = %v, want %v", mean, se, within, tc.weighted)
				}
			})
		}
	}
}

func meanSE(v []float64) (mean, se float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(v)-1) / float64(len(v)))
}

// TestGroupWeightDefault: Weight 0 and an explicit 1 are today's random choice, bit for bit (rows
// and digest); a constant weight (random choice with w = 1/f) fits the same map up to rounding.
func TestGroupWeightDefault(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinPairs = 20
	c := mustNew(t, cfg)
	steps := func(w float64) []Step {
		r := &splitMix64{s: 7}
		var out []Step
		for v := range 4 {
			s := ipwStep(r, 30, 6, false)
			s.Step = int64(v)
			for g := range s.Groups {
				s.Groups[g].Weight = w
			}
			out = append(out, s)
		}
		return out
	}
	base, bst := run(t, c, steps(0))
	one, ost := run(t, c, steps(1))
	if !slices.EqualFunc(base, one, slices.Equal) || bst.Digest() != ost.Digest() {
		t.Fatal("Weight 1 differs from Weight 0")
	}
	four, fst := run(t, c, steps(4))
	bx, by := bst.Breakpoints()
	fx, fy := fst.Breakpoints()
	if !slices.Equal(bx, fx) || len(by) != len(fy) {
		t.Fatalf("constant weight changed the blocks: %v vs %v", bx, fx)
	}
	for i := range by {
		if math.Abs(by[i]-fy[i]) > 1e-12 {
			t.Errorf("breakpoint %d: %v vs %v", i, by[i], fy[i])
		}
	}
	for v := range base {
		for i := range base[v] {
			if math.Abs(base[v][i].Weight-four[v][i].Weight) > 1e-12 || math.Abs(base[v][i].Advantage-four[v][i].Advantage) > 1e-12 {
				t.Fatalf("step %d row %d: %+v vs %+v", v, i, base[v][i], four[v][i])
			}
		}
	}
}

// TestWindowFitMatchesFitIsotonic: with unequal weights the window's refit is FitIsotonic over the
// window's pairs and weights (weighted pool-adjacent-violators), and the anchor rows' weights are
// the IVD weight times the group's weight over its mean on the step's anchor rows.
func TestWindowFitMatchesFitIsotonic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinPairs = 2
	c := mustNew(t, cfg)
	s := ipwStep(&splitMix64{s: 3}, 60, 4, true)
	rows, st, err := c.Correct(c.NewState("run", "s"), s)
	if err != nil {
		t.Fatal(err)
	}
	var x, y, w []float64
	var wsum, n float64
	for _, g := range s.Groups {
		if !g.Anchor {
			continue
		}
		for _, r := range g.Rollouts {
			x, y, w = append(x, r.Predicted.Score), append(y, r.Executed.Score), append(w, g.Weight)
			wsum += g.Weight
			n++
		}
	}
	want, err := FitIsotonic(x, y, w)
	if err != nil {
		t.Fatal(err)
	}
	wx, wy := want.Breakpoints()
	gx, gy := st.Breakpoints()
	if !slices.Equal(wx, gx) {
		t.Fatalf("breakpoint x: got %v, want %v", gx, wx)
	}
	for i := range wy {
		if math.Abs(wy[i]-gy[i]) > 1e-12 {
			t.Errorf("breakpoint %d: got %v, want %v", i, gy[i], wy[i])
		}
	}
	weightOf := map[string]float64{}
	for _, g := range s.Groups {
		weightOf[g.ID] = g.Weight
	}
	for _, r := range rows {
		if r.Source != SourceAnchor {
			continue
		}
		if want := weightOf[r.GroupID] / (wsum / n); math.Abs(r.Weight-want) > 1e-12 {
			t.Fatalf("group %s: row weight %v, want %v (IVD weight 1 before the step)", r.GroupID, r.Weight, want)
		}
	}
}

// TestGroupWeightErrors: a weight must be finite and in [0, 1e6], and only the default mode's
// isotonic and centred maps take weights.
func TestGroupWeightErrors(t *testing.T) {
	zs := ZSpaceConfig()
	for _, tc := range []struct {
		name   string
		cfg    Config
		weight float64
		want   string
	}{
		{"negative", DefaultConfig(), -1, "weight -1 not in"},
		{"NaN", DefaultConfig(), math.NaN(), "weight NaN not in"},
		{"too large", DefaultConfig(), 2e6, "not in [0, 1e+06]"},
		{"reference mode", ReferenceConfig(), 2, "isotonic and centred maps only"},
		{"z-space map", zs, 2, "isotonic and centred maps only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, tc.cfg)
			s := ipwStep(&splitMix64{s: 1}, 4, 3, false)
			s.Groups[2].Weight, s.Groups[2].Anchor = tc.weight, true
			_, _, err := c.Correct(c.NewState("run", "s"), s)
			if !errors.Is(err, ErrInvalidStep) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidStep containing %q", err, tc.want)
			}
		})
	}
}

// TestWeightedStateEncoding: a window holding weights encodes as version 3 with the weights after
// the tail and decodes, from Encode or from a head and its chunks, to a state with the same
// digest and the same next step; once the weighted pairs are evicted it encodes as before weights.
func TestWeightedStateEncoding(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinPairs, cfg.Window = 2, 400
	c := mustNew(t, cfg)
	r := &splitMix64{s: 11}
	s0 := ipwStep(r, 40, 4, true)
	_, st, err := c.Correct(c.NewState("run", "s"), s0)
	if err != nil {
		t.Fatal(err)
	}
	enc := st.Encode()
	if v := binary.LittleEndian.Uint16(enc[8:]); v != 3 {
		t.Fatalf("weighted window encodes as version %d, want 3", v)
	}
	dec, err := DecodeState(enc)
	if err != nil {
		t.Fatal(err)
	}
	var window []byte
	first, n := st.WindowSpan()
	window = st.AppendWindow(window, first, first+uint64(n))
	asm, err := AssembleState(st.EncodeHead(), window)
	if err != nil {
		t.Fatal(err)
	}
	next := ipwStep(r, 40, 4, true)
	next.Step = 1
	want, wst, err := c.Correct(st, next)
	if err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]*State{"DecodeState": dec, "AssembleState": asm} {
		if other.Digest() != st.Digest() || !bytes.Equal(other.Encode(), enc) {
			t.Fatalf("%s: digest or encoding differs", name)
		}
		got, gst, err := c.Correct(other, next)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || gst.Digest() != wst.Digest() {
			t.Fatalf("%s: next step differs", name)
		}
	}
	// Unit-weight steps evict every weighted pair from the 400-pair window.
	for v := int64(1); v < 6; v++ {
		s := ipwStep(r, 40, 4, false)
		s.Step = v
		for g := range s.Groups {
			s.Groups[g].Anchor = true
		}
		if _, st, err = c.Correct(st, s); err != nil {
			t.Fatal(err)
		}
	}
	if v := binary.LittleEndian.Uint16(st.Encode()[8:]); v != 1 {
		t.Fatalf("unweighted window encodes as version %d, want 1", v)
	}
	bad := bytes.Clone(enc)
	binary.LittleEndian.PutUint64(bad[len(bad)-8:], math.Float64bits(-1))
	if _, err := DecodeState(bad); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("negative weight: %v, want ErrCorruptState", err)
	}
}

// TestMapUncertainty: u(x) = s_b/√n_b of the block holding x, pooled variance for single-pair
// blocks, the largest u outside the window's range and 1 before the window holds 2 pairs.
func TestMapUncertainty(t *testing.T) {
	// Blocks: x = 0 with y {0.2, 0.3} and x = 0.1 with y {0, 0.2} violate and pool (mean 0.175,
	// 4 pairs); x = 0.5 with y 0.9 and x = 0.8 with y {0.8, 1.0} pool too (equal means 0.9, 3 pairs).
	ps := []pair{{0, 0.2, 1}, {0, 0.3, 1}, {0.1, 0, 1}, {0.1, 0.2, 1}, {0.5, 0.9, 1}, {0.8, 0.8, 1}, {0.8, 1.0, 1}}
	ss := func(m float64, ys ...float64) float64 {
		var v float64
		for _, y := range ys {
			v += (y - m) * (y - m)
		}
		return v
	}
	uA := math.Sqrt(ss(0.175, 0.2, 0.3, 0, 0.2) / 3 / 4)
	uB := math.Sqrt(ss(0.9, 0.9, 0.8, 1.0) / 2 / 3)
	m := uncertaintyOf(ps)
	for _, tc := range []struct {
		x, want float64
	}{
		{0, uA}, {0.05, uA}, {0.1, uA}, {0.3, max(uA, uB)}, {0.5, uB}, {0.8, uB},
		{-0.1, max(uA, uB)}, {0.9, max(uA, uB)}, {math.NaN(), max(uA, uB)},
	} {
		if got := m.At(tc.x); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("u(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	for _, few := range [][]pair{nil, {{0.5, 0.5, 1}}} {
		if got := uncertaintyOf(few).At(0.5); got != 1 {
			t.Errorf("%d pairs: u = %v, want 1", len(few), got)
		}
	}
	// Single-pair block: pooled variance over the window.
	one := uncertaintyOf([]pair{{0, 0, 1}, {0, 0.2, 1}, {1, 1, 1}})
	pooled := ss(0.1, 0, 0.2) / 2
	if got, want := one.At(1), math.Sqrt(pooled/1); math.Abs(got-want) > 1e-15 {
		t.Errorf("single-pair block: u = %v, want %v", got, want)
	}
}

// TestObserveGroupWeighted: a group of relative weight k moves IVD's EWMA as k groups with its
// estimate would.
func TestObserveGroupWeighted(t *testing.T) {
	d, tr := []float64{0.1, 0.5, 0.4, 0.9}, []float64{0.2, 0.4, 0.6, 0.8}
	seed := []float64{0.3, 0.2, 0.9, 0.1}
	for _, k := range []int{1, 2, 3, 5} {
		c := mustNew(t, DefaultConfig())
		once, rep := c.NewState("run", "s"), c.NewState("run", "s")
		once.observeGroup(seed, tr, 1)
		rep.observeGroup(seed, tr, 1)
		once.observeGroup(d, tr, float64(k))
		for range k {
			rep.observeGroup(d, tr, 1)
		}
		if a, b := once.ewma, rep.ewma; math.Abs(a-b) > 1e-15 {
			t.Errorf("k=%d: weighted EWMA %v, %d repeats %v", k, a, k, b)
		}
	}
}
