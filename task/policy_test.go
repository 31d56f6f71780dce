package task

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestUpdateMovesProbability(t *testing.T) {
	s := Solution{Model: Boosting, Features: Poly2, Reg: 1, LR: 2, Iters: 3, Capacity: 1}
	other := Solution{Model: KNN, Features: Raw, Reg: 4, LR: 0, Iters: 0, Capacity: 3}
	tests := []struct {
		name    string
		adv, w  []float64
		masked  []bool
		wantDir float64 // sign of the change of every chosen probability of s
	}{
		{"positive advantage", []float64{1, -1}, []float64{1, 1}, nil, +1},
		{"negative advantage", []float64{-1, 1}, []float64{1, 1}, nil, -1},
		{"masked row skipped", []float64{1, -1}, []float64{1, 1}, []bool{true, true}, 0},
		{"zero weight", []float64{1, 0}, []float64{0, 1}, nil, 0},
		{"weight scales", []float64{1, -1}, []float64{4, 1}, nil, +1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPolicy()
			before := p.Clone()
			if err := p.Update([]Solution{s, other}, tt.adv, tt.w, tt.masked, 0.5); err != nil {
				t.Fatal(err)
			}
			for d, k := range s.choices() {
				delta := p.Probabilities(d)[k] - before.Probabilities(d)[k]
				switch {
				case tt.wantDir > 0 && !(delta > 1e-6):
					t.Errorf("%s: prob of chosen %d moved %v, want up", decisionNames[d], k, delta)
				case tt.wantDir < 0 && !(delta < -1e-6):
					t.Errorf("%s: prob of chosen %d moved %v, want down", decisionNames[d], k, delta)
				case tt.wantDir == 0 && delta != 0:
					t.Errorf("%s: prob moved %v, want unchanged", decisionNames[d], delta)
				}
			}
		})
	}
}

// TestUpdateIsPolicyGradient checks the step against a finite-difference
// gradient of J = mean_i a_i·w_i·log π(s_i) over unmasked rows.
func TestUpdateIsPolicyGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := NewPolicy()
	for d := range p.logits {
		for j := range p.logits[d] {
			p.logits[d][j] = rng.NormFloat64()
		}
	}
	samples, _ := p.Sample(rng, 12)
	adv := make([]float64, 12)
	w := make([]float64, 12)
	masked := make([]bool, 12)
	for i := range adv {
		adv[i], w[i], masked[i] = rng.NormFloat64(), 1+3*rng.Float64(), i%5 == 0
	}
	objective := func(q *Policy) float64 {
		j, n := 0.0, 0
		for i, s := range samples {
			if masked[i] {
				continue
			}
			lp, _ := q.LogProb(s)
			j += adv[i] * w[i] * lp
			n++
		}
		return j / float64(n)
	}
	const lr = 0.1
	next := p.Clone()
	if err := next.Update(samples, adv, w, masked, lr); err != nil {
		t.Fatal(err)
	}
	for d := range p.logits {
		for j := range p.logits[d] {
			const h = 1e-6
			up, down := p.Clone(), p.Clone()
			up.logits[d][j] += h
			down.logits[d][j] -= h
			fd := (objective(up) - objective(down)) / (2 * h)
			got := (next.logits[d][j] - p.logits[d][j]) / lr
			if math.Abs(got-fd) > 1e-6 {
				t.Fatalf("%s[%d]: step/lr %v, finite difference %v", decisionNames[d], j, got, fd)
			}
		}
	}
}

func TestUpdateErrors(t *testing.T) {
	s := []Solution{{}, {}}
	ok := []float64{1, 1}
	tests := []struct {
		name    string
		samples []Solution
		adv, w  []float64
		masked  []bool
		lr      float64
	}{
		{"short advantages", s, []float64{1}, ok, nil, 0.1},
		{"short mask", s, ok, ok, []bool{false}, 0.1},
		{"NaN advantage", s, []float64{math.NaN(), 1}, ok, nil, 0.1},
		{"negative weight", s, ok, []float64{1, -1}, nil, 0.1},
		{"Inf weight", s, ok, []float64{1, math.Inf(1)}, nil, 0.1},
		{"negative lr", s, ok, ok, nil, -1},
		{"invalid sample", []Solution{{}, {Reg: 7}}, ok, ok, nil, 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPolicy()
			if err := p.Update(tt.samples, tt.adv, tt.w, tt.masked, tt.lr); !errors.Is(err, ErrInvalidUpdate) {
				t.Fatalf("err = %v, want ErrInvalidUpdate", err)
			}
			if p.Entropy() != NewPolicy().Entropy() {
				t.Fatal("failed update changed the policy")
			}
		})
	}
	// A masked row's NaN advantage is not an error: it carries no reward.
	if err := NewPolicy().Update(s, []float64{math.NaN(), 1}, ok, []bool{true, false}, 0.1); err != nil {
		t.Fatalf("masked NaN: %v", err)
	}
}

func TestSampleMatchesProbabilities(t *testing.T) {
	p := NewPolicy()
	p.logits[decModel] = []float64{2, 0, -1, 0.5, 0}
	want := p.Probabilities(decModel)
	const n = 20000
	a, err := p.Sample(rand.New(rand.NewPCG(5, 6)), n)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Sample(rand.New(rand.NewPCG(5, 6)), n)
	counts := make([]float64, numModels)
	for i, s := range a {
		if s != b[i] {
			t.Fatal("same rng state gave different samples")
		}
		counts[s.Model]++
	}
	for m, c := range counts {
		if got := c / n; math.Abs(got-want[m]) > 4*math.Sqrt(want[m]*(1-want[m])/n) {
			t.Errorf("model %d: frequency %.4f, probability %.4f", m, got, want[m])
		}
	}
	if _, err := p.Sample(nil, 1); err == nil {
		t.Error("nil rng accepted")
	}
	if _, err := p.Sample(rand.New(rand.NewPCG(1, 1)), -1); err == nil {
		t.Error("negative n accepted")
	}
}

func TestEntropyCloneMode(t *testing.T) {
	p := NewPolicy()
	want := 0.0
	for _, n := range decisionSizes {
		want += math.Log(float64(n))
	}
	if math.Abs(p.Entropy()-want) > 1e-12 {
		t.Fatalf("uniform entropy %v, want %v", p.Entropy(), want)
	}
	c := p.Clone()
	c.logits[decFeatures][Poly2] = 3
	if p.logits[decFeatures][Poly2] != 0 {
		t.Fatal("Clone shares logits")
	}
	if c.Entropy() >= p.Entropy() {
		t.Fatal("peaked policy not lower entropy")
	}
	if c.Mode().Features != Poly2 || c.Mode().Model != Ridge {
		t.Fatalf("Mode = %v", c.Mode())
	}
}

// TestExpectedScoreExact checks ExpectedScore against a brute-force sum over
// the full (non-effective) solution space on a policy that puts mass only on
// a few solutions, and the headroom between uniform and best.
func TestExpectedScoreExact(t *testing.T) {
	ctx := context.Background()
	e, err := NewEvalSet(ctx, []*Problem{NewProblem(100, Regression)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if e.Len() != len(EffectiveSolutions()) {
		t.Fatalf("eval set has %d solutions", e.Len())
	}
	lookup := map[Solution]float64{}
	for i := range e.Len() {
		s, v := e.At(i)
		lookup[s] = v
	}
	p := NewPolicy()
	rng := rand.New(rand.NewPCG(3, 3))
	for d := range p.logits {
		for j := range p.logits[d] {
			p.logits[d][j] = 2 * rng.NormFloat64()
		}
	}
	brute := 0.0
	var c [numDecisions]int
	var walk func(d int, q float64)
	walk = func(d int, q float64) {
		if d == numDecisions {
			brute += q * lookup[fromChoices(c).Effective()]
			return
		}
		probs := p.Probabilities(d)
		for k := range decisionSizes[d] {
			c[d] = k
			walk(d+1, q*probs[k])
		}
	}
	walk(0, 1)
	if got := p.ExpectedScore(e); math.Abs(got-brute) > 1e-12 {
		t.Fatalf("ExpectedScore %v, brute force %v", got, brute)
	}
	best, bv := e.Best()
	uni := NewPolicy().ExpectedScore(e)
	t.Logf("uniform policy %.3f, best solution %v %.3f", uni, best, bv)
	if bv < uni+0.3 {
		t.Errorf("headroom %.3f between uniform and best is too small for learning curves", bv-uni)
	}
}
