package sim

import (
	"context"
	"slices"
	"testing"
)

func TestWithTrustGate(t *testing.T) {
	arms := WithPolicies(GridArms(0.25), []AnchorPolicy{PolicyRandom, PolicyMixed})
	names := func(as []Arm) (out []string) {
		for _, a := range as {
			out = append(out, a.Name)
		}
		return out
	}
	if got := WithTrustGate(arms, nil); !slices.Equal(names(got), names(arms)) {
		t.Fatalf("no modes changed the arms: %v", names(got))
	}
	if got := WithTrustGate(arms, []bool{false}); !slices.Equal(names(got), names(arms)) {
		t.Fatalf("off changed the arms: %v", names(got))
	}
	on := WithTrustGate(arms, []bool{true})
	want := []string{ArmRealGRPO, ArmPureWM, "none-gate", "ivd-gate", "od-gate", "wmrl-gate", "wmrl-cir-gate",
		"none-mixed-gate", "ivd-mixed-gate", "od-mixed-gate", "wmrl-mixed-gate", "wmrl-cir-mixed-gate"}
	if !slices.Equal(names(on), want) {
		t.Fatalf("on: %v, want %v", names(on), want)
	}
	for _, a := range on {
		if a.Correction.TrustGate != gateable(a) {
			t.Fatalf("arm %s: trust gate %v", a.Name, a.Correction.TrustGate)
		}
	}
	both := WithTrustGate(arms, []bool{false, true})
	if len(both) != len(arms)+len(want)-2 || !slices.Equal(names(both)[:len(arms)], names(arms)) {
		t.Fatalf("off,on: %v", names(both))
	}
	if ref := WithTrustGate(Arms(0.25), []bool{true}); slices.Contains(names(ref), ArmReference+ArmGateSuffix) {
		t.Fatal("the reference arm was gated")
	}
}

// TestTrustGateRun: under an uninformative judge (error model σ = 100: r̂ is noise; at σ = 3 this
// small run's windows still show ρ̂ ≈ 0.2–0.4, above the threshold) the
// gated arm closes the gate once the window holds enough pairs and masks the world-model rows;
// under a perfect judge (σ = 0) the gate stays open and the gated arm trains exactly as the
// ungated one, on the same seed.
func TestTrustGateRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an eval set")
	}
	eval := evalSet(t)
	cfg := tiny()
	cfg.Steps = 8
	cache := NewScoreCache()
	arms := WithTrustGate([]Arm{armNamed(t, ArmWMRL)}, []bool{false, true})
	for _, noise := range []float64{100, 0} {
		c := cfg
		c.ErrorModel = &ErrorModel{Noise: noise, Scores: cache}
		var res []Result
		for _, a := range arms {
			r, err := Run(context.Background(), c, a, eval, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, r)
		}
		off, on := res[0], res[1]
		if _, ok := GateClosedFraction(off); ok || off.Steps[0].GateLabel() != "off" {
			t.Fatal("ungated arm reports a gate")
		}
		frac, ok := GateClosedFraction(on)
		if !ok {
			t.Fatal("gated arm reports no gate")
		}
		for _, s := range on.Steps {
			if s.Gate.N < 10 && s.Gate.Closed {
				t.Fatalf("σ %g step %d: closed with %d pairs", noise, s.Step, s.Gate.N)
			}
		}
		switch noise {
		case 100:
			for _, s := range on.Steps {
				t.Logf("step %d gate n %d rho %.3f thr %.3f closed %v", s.Step, s.Gate.N, s.Gate.Rho, s.Gate.Threshold, s.Gate.Closed)
			}
			if frac == 0 {
				t.Fatal("σ 100: the gate never closed")
			}
		case 0:
			if frac != 0 || on.FinalScore() != off.FinalScore() {
				t.Fatalf("σ 0: closed fraction %v, final %v gated vs %v", frac, on.FinalScore(), off.FinalScore())
			}
		}
	}
}
