package sim

import (
	"context"
	"math"
	"testing"

	"github.com/wmrl/wmrl/task"
)

func TestElaborateness(t *testing.T) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range task.EffectiveSolutions() {
		k := Elaborateness(s)
		if !(k >= 0 && k <= 1) {
			t.Fatalf("κ(%s) = %v outside [0,1]", s, k)
		}
		lo, hi = min(lo, k), max(hi, k)
	}
	if lo != 0 || hi != 1 {
		t.Fatalf("κ spans [%v, %v], want [0, 1] so the bias reaches ±B", lo, hi)
	}
}

// TestErrorModelPrediction: with σ = 0 the prediction is r + B(2κ−1)
// exactly; the noise is zero-mean with the chosen σ and reproducible.
func TestErrorModelPrediction(t *testing.T) {
	sols := task.EffectiveSolutions()
	m := ErrorModel{Bias: 0.2}
	for _, s := range sols[:50] {
		if got, want := m.predict(0.5, s, 3, 1, 2, 3), 0.5+0.2*(2*Elaborateness(s)-1); math.Abs(got-want) > 1e-15 {
			t.Fatalf("%s: r̂ %v, want %v", s, got, want)
		}
	}
	m = ErrorModel{Noise: 0.3}
	var sum, sq float64
	const n = 20000
	for i := range n {
		xi := m.predict(0, sols[0], 7, i/64, (i/8)%8, i%8)
		sum += xi
		sq += xi * xi
	}
	mean, sd := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 4*0.3/math.Sqrt(n) || math.Abs(sd-0.3) > 0.01 {
		t.Fatalf("noise mean %v sd %v, want 0 and 0.3", mean, sd)
	}
	if m.predict(0, sols[0], 7, 1, 2, 3) != m.predict(0, sols[0], 7, 1, 2, 3) || m.predict(0, sols[0], 7, 1, 2, 3) == m.predict(0, sols[0], 8, 1, 2, 3) {
		t.Fatal("noise is not a function of (seed, step, group, index)")
	}
	// The adversarial judge reads −r with the same bias and the same noise draw.
	for _, s := range sols[:50] {
		m := ErrorModel{Bias: 0.2, Noise: 0.15}
		adv := m
		adv.Adversarial = true
		if got, want := adv.predict(0.7, s, 3, 1, 2, 3), m.predict(0.7, s, 3, 1, 2, 3)-2*0.7; math.Abs(got-want) > 1e-12 {
			t.Fatalf("%s: adversarial r̂ %v, want %v", s, got, want)
		}
	}
	if (ErrorModel{Bias: -1}).Validate() == nil || (ErrorModel{Noise: math.Inf(1)}).Validate() == nil {
		t.Fatal("invalid error model accepted")
	}
}

// TestErrorModelRun: under the error model pure-WM sees r̂ built from real
// scores, which costs no execution, and the cache makes a second run of the
// same seed execute nothing while reproducing it exactly.
func TestErrorModelRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an eval set")
	}
	eval, err := Eval(context.Background(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Steps, cfg.Groups = 3, 2
	cache := NewScoreCache()
	cfg.ErrorModel = &ErrorModel{Bias: 0.3, Noise: 0.1, Scores: cache}
	arms := GridArms(0.5)
	var pure Arm
	for _, a := range arms {
		if a.Name == ArmPureWM {
			pure = a
		}
	}
	a, err := Run(context.Background(), cfg, pure, eval, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Steps[len(a.Steps)-1].Executions; got != 0 {
		t.Fatalf("pure-wm under the error model counted %d executions", got)
	}
	filled := cache.Len()
	if filled == 0 || filled > cfg.Steps*cfg.Groups*cfg.GroupSize {
		t.Fatalf("cache holds %d scores after %d rollouts", filled, cfg.Steps*cfg.Groups*cfg.GroupSize)
	}
	b, err := Run(context.Background(), cfg, pure, eval, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cache.Len() != filled || a.FinalScore() != b.FinalScore() {
		t.Fatalf("second run: cache %d → %d, final %v vs %v", filled, cache.Len(), a.FinalScore(), b.FinalScore())
	}
}

// TestErrorGridAdversarial: an adversarial grid's judge reads −r in every cell: with B = σ = 0
// every anchor pair's prediction is minus its executed score.
func TestErrorGridAdversarial(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an eval set")
	}
	eval, err := Eval(context.Background(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Steps, cfg.Groups = 3, 4
	arms, err := ArmsByName([]string{ArmWMRL}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := ErrorGrid{Config: cfg, Biases: []float64{0}, Noises: []float64{0}, Arms: arms, Seeds: []int64{2},
		Adversarial: true}.Run(context.Background(), eval, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range cells[0].Results {
		for _, p := range r.Pairs {
			n++
			if p.Predicted != -p.Executed {
				t.Fatalf("arm %s pair %+v: want predicted = −executed", r.Arm, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no anchor pairs to check")
	}
}
