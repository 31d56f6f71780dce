package sim

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/correction"
)

// pairedRun builds a result from per-step (cumulative executions, score) pairs; every step has two
// anchor groups unless anchors says otherwise.
func pairedRun(arm string, seed int64, initial float64, execs []int, scores []float64, anchors []int, maxW []float64) Result {
	r := Result{Arm: arm, Seed: seed, InitialScore: initial}
	for i := range execs {
		rec := StepRecord{Step: i, Executions: execs[i], Score: scores[i], AnchorGroups: 2}
		if anchors != nil {
			rec.AnchorGroups = anchors[i]
		}
		if maxW != nil {
			rec.MaxPropensityWeight = maxW[i]
		}
		r.Steps = append(r.Steps, rec)
	}
	return r
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 || (math.IsNaN(a) && math.IsNaN(b)) }

// TestScoreAtExecutions: the E* rule takes the last step whose cumulative executions are ≤ E*,
// and the untrained policy's score when the first step already spent more.
func TestScoreAtExecutions(t *testing.T) {
	r := pairedRun("a", 1, 0.05, []int{8, 24, 40, 40, 56}, []float64{0.1, 0.2, 0.3, 0.35, 0.4}, nil, nil)
	for _, tc := range []struct {
		e    int
		want float64
	}{
		{0, 0.05}, {7, 0.05}, {8, 0.1}, {23, 0.1}, {24, 0.2}, {40, 0.35}, {55, 0.35}, {56, 0.4}, {1000, 0.4},
	} {
		if got := ScoreAtExecutions(r, tc.e); got != tc.want {
			t.Errorf("E*=%d: score %v, want %v", tc.e, got, tc.want)
		}
	}
}

// TestPairedHandComputed checks every statistic of a three-seed pairing computed by hand.
func TestPairedHandComputed(t *testing.T) {
	e := []int{16, 32, 48, 64}
	results := []Result{
		pairedRun(ArmRealGRPO, 1, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil),
		pairedRun(ArmRealGRPO, 2, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil),
		pairedRun(ArmRealGRPO, 3, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil),
		// seed 1: base reaches 0.9 at 48, arm at 24 (Δ −24); E* = min(64, 56) = 56: 0.95 vs 0.95.
		pairedRun("wmrl", 1, 0, e, []float64{0.5, 0.8, 0.95, 0.97}, nil, nil),
		pairedRun("wmrl-routed", 1, 0, []int{16, 24, 40, 56}, []float64{0.6, 0.92, 0.93, 0.95}, []int{2, 1, 2, 2}, []float64{3, 8, 0, 4}),
		// seed 2: base at 48, arm at 32 (Δ −16); E* = 48: 0.99 vs 0.91.
		pairedRun("wmrl", 2, 0, e, []float64{0.5, 0.7, 0.91, 0.96}, nil, nil),
		pairedRun("wmrl-routed", 2, 0, []int{8, 16, 32, 48}, []float64{0.4, 0.6, 0.91, 0.99}, nil, []float64{2, 2, 2, 2}),
		// seed 3: base at 16, arm never; E* = 64: 0.4 vs 0.99.
		pairedRun("wmrl", 3, 0, e, []float64{0.95, 0.96, 0.97, 0.99}, nil, nil),
		pairedRun("wmrl-routed", 3, 0, e, []float64{0.1, 0.2, 0.3, 0.4}, nil, nil),
	}
	cs, err := Paired(results, []Pairing{{Arm: "wmrl-routed", Base: "wmrl"}}, 0.9, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("%d comparisons, want 1", len(cs))
	}
	c := cs[0]
	t12 := 12.706204736174698 // t(0.975, 1)
	t2 := 4.302652729749464   // t(0.975, 2)
	sd := func(xs ...float64) float64 {
		var m, v float64
		for _, x := range xs {
			m += x / float64(len(xs))
		}
		for _, x := range xs {
			v += (x - m) * (x - m) / float64(len(xs)-1)
		}
		return math.Sqrt(v)
	}
	for _, chk := range []struct {
		name      string
		got, want float64
	}{
		{"seeds", float64(c.Seeds), 3},
		{"arm anchor fraction", c.Arm.AnchorFraction, (7.0/32 + 8.0/32 + 8.0/32) / 3},
		{"base anchor fraction", c.Base.AnchorFraction, 0.25},
		{"arm max weight", c.Arm.MaxWeight, 8},
		{"base max weight", c.Base.MaxWeight, 0},
		{"arm reached", float64(c.Arm.Reached), 2},
		{"base reached", float64(c.Base.Reached), 3},
		{"arm execs mean", c.Arm.ExecutionsToTarget.Mean, 28},
		{"arm execs ci", c.Arm.ExecutionsToTarget.CI, t12 * sd(24, 32) / math.Sqrt(2)},
		{"base execs mean", c.Base.ExecutionsToTarget.Mean, (48 + 48 + 16) / 3.0},
		{"base execs ci", c.Base.ExecutionsToTarget.CI, t2 * sd(48, 48, 16) / math.Sqrt(3)},
		{"exec diff mean", c.ExecDiff.Mean, -20},
		{"exec diff ci", c.ExecDiff.CI, t12 * sd(-24, -16) / math.Sqrt(2)},
		{"exec diff n", float64(c.ExecDiff.N), 2},
		{"arm score@E*", c.Arm.ScoreAtEqual.Mean, (0.95 + 0.99 + 0.4) / 3},
		{"base score@E*", c.Base.ScoreAtEqual.Mean, (0.95 + 0.91 + 0.99) / 3},
		{"score diff mean", c.ScoreDiff.Mean, (0 + 0.08 - 0.59) / 3},
		{"score diff ci", c.ScoreDiff.CI, t2 * sd(0, 0.08, -0.59) / math.Sqrt(3)},
	} {
		if !near(chk.got, chk.want) {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
	if c.Verdict != VerdictTie {
		t.Errorf("verdict %s, want tie (Δ execs interval −20 ± 50.8 holds 0)", c.Verdict)
	}
	var csv, md bytes.Buffer
	if err := WritePairedCSV(&csv, cs); err != nil {
		t.Fatal(err)
	}
	if err := PairedTable(&md, cs, 0.9); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[1], ",tie") {
		t.Errorf("paired.csv:\n%s", csv.String())
	}
	if !strings.Contains(md.String(), "| wmrl-routed vs wmrl | 0.240 / 0.250 | 8.00 | — | 2 / 3 of 3 | 28 ± 51 | 37 ± 46 | -20.0 ± 50.8 (2) |") {
		t.Errorf("paired.md row:\n%s", md.String())
	}
}

// TestPairedSkipsIncompleteSeeds: a seed without real-GRPO or without one of the arms is left out.
func TestPairedSkipsIncompleteSeeds(t *testing.T) {
	e := []int{16, 32}
	s := []float64{0.5, 1}
	results := []Result{
		pairedRun(ArmRealGRPO, 1, 0, e, s, nil, nil), pairedRun("a", 1, 0, e, s, nil, nil), pairedRun("b", 1, 0, e, s, nil, nil),
		pairedRun("a", 2, 0, e, s, nil, nil), pairedRun("b", 2, 0, e, s, nil, nil),
		pairedRun(ArmRealGRPO, 3, 0, e, s, nil, nil), pairedRun("a", 3, 0, e, s, nil, nil),
	}
	cs, err := Paired(results, []Pairing{{Arm: "a", Base: "b"}}, 0.9, 8)
	if err != nil || cs[0].Seeds != 1 || cs[0].ScoreDiff.N != 1 {
		t.Fatalf("err %v, %+v: want 1 seed", err, cs)
	}
	if _, err := Paired(results, nil, 0.9, 0); err == nil {
		t.Error("groups 0 accepted")
	}
}

// TestVerdict applies the pre-registered rules (docs/anchors.md, "What counts as a win") to
// hand-made intervals.
func TestVerdict(t *testing.T) {
	est := func(mean, ci float64, n int) Estimate { return Estimate{Mean: mean, CI: ci, N: n} }
	nan := math.NaN()
	for _, tc := range []struct {
		name                 string
		kind                 PairKind
		exec, score          Estimate
		reached, baseReached int
		want                 string
	}{
		{"fewer executions, score up", PairPolicy, est(-20, 5, 5), est(0.01, 0.02, 5), 5, 5, VerdictWin},
		{"fewer executions, score down inside interval", PairPolicy, est(-20, 5, 5), est(-0.01, 0.02, 5), 5, 5, VerdictWin},
		{"fewer executions, more seeds reach", PairPolicy, est(-20, 5, 4), est(0, 0.02, 5), 5, 4, VerdictWin},
		{"fewer executions but fewer seeds reach", PairPolicy, est(-20, 5, 4), est(0, 0.02, 5), 4, 5, VerdictTie},
		{"fewer executions but score down outside interval", PairPolicy, est(-20, 5, 5), est(-0.05, 0.02, 5), 5, 5, VerdictLoss},
		{"interval touching 0 does not exclude it", PairPolicy, est(-5, 5, 5), est(0, 0.02, 5), 5, 5, VerdictTie},
		{"interval holds 0", PairPolicy, est(-5, 8, 5), est(0, 0.02, 5), 5, 5, VerdictTie},
		{"more executions outside interval", PairPolicy, est(20, 5, 5), est(0.05, 0.02, 5), 5, 5, VerdictLoss},
		{"score down outside interval, executions tie", PairPolicy, est(1, 5, 5), est(-0.05, 0.02, 5), 5, 5, VerdictLoss},
		{"one paired seed has no interval", PairPolicy, est(-20, nan, 1), est(0.01, 0.02, 5), 5, 5, VerdictTie},
		{"no paired seed", PairPolicy, est(nan, nan, 0), est(0.01, 0.02, 5), 0, 0, VerdictTie},
		{"identical differences: zero-width interval", PairPolicy, est(-8, 0, 3), est(0, 0, 3), 3, 3, VerdictWin},
		{"gate helps", PairGate, est(nan, nan, 0), est(0.03, 0.01, 5), 5, 5, VerdictHelp},
		{"gate costs", PairGate, est(-30, 5, 5), est(-0.03, 0.01, 5), 5, 5, VerdictCost},
		{"gate neutral", PairGate, est(-30, 5, 5), est(0.005, 0.01, 5), 5, 5, VerdictNeutral},
		{"gate without interval", PairGate, est(0, 0, 0), est(0.5, nan, 1), 1, 1, VerdictNeutral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := PairedComparison{Pairing: Pairing{Kind: tc.kind}, ExecDiff: tc.exec, ScoreDiff: tc.score}
			c.Arm.Reached, c.Base.Reached = tc.reached, tc.baseReached
			if got := verdict(c); got != tc.want {
				t.Errorf("verdict %s, want %s", got, tc.want)
			}
		})
	}
}

// TestPolicyPairings pairs each policy arm with the arm it came from, only when that arm runs.
func TestPolicyPairings(t *testing.T) {
	arms, err := ArmsByName([]string{"wmrl", "od"}, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	all := WithPolicies(arms, []AnchorPolicy{PolicyRandom, PolicyRouted, PolicyMixedNoIPW})
	want := []Pairing{
		{Arm: "wmrl-routed", Base: "wmrl"}, {Arm: "od-routed", Base: "od"},
		{Arm: "wmrl-mixed-noipw", Base: "wmrl"}, {Arm: "od-mixed-noipw", Base: "od"},
	}
	if got := PolicyPairings(all); !reflect.DeepEqual(got, want) {
		t.Errorf("pairings %+v, want %+v", got, want)
	}
	if got := PolicyPairings(WithPolicies(arms, []AnchorPolicy{PolicyRouted})); len(got) != 0 {
		t.Errorf("pairings without random arms: %+v", got)
	}
}

// TestWithAdvantage sets the estimator of every arm, real-GRPO included, and keeps the names.
func TestWithAdvantage(t *testing.T) {
	arms := WithAdvantage(WithPolicies(GridArms(0.25), []AnchorPolicy{PolicyRandom, PolicyRouted}), correction.DrGRPO)
	for i, a := range arms {
		if a.Correction.Advantage != correction.DrGRPO {
			t.Errorf("arm %s: estimator %v", a.Name, a.Correction.Advantage)
		}
		if a.Name != WithPolicies(GridArms(0.25), []AnchorPolicy{PolicyRandom, PolicyRouted})[i].Name {
			t.Errorf("arm %d renamed to %s", i, a.Name)
		}
	}
}

// TestGatePairings pairs each gated arm with the same arm without the gate, and reports the share
// of steps the gate was closed.
func TestGatePairings(t *testing.T) {
	arms, err := ArmsByName([]string{"wmrl"}, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	all := WithTrustGate(WithPolicies(arms, []AnchorPolicy{PolicyRandom, PolicyMixed}), []bool{false, true})
	want := []Pairing{{Arm: "wmrl-gate", Base: "wmrl", Kind: PairGate}, {Arm: "wmrl-mixed-gate", Base: "wmrl-mixed", Kind: PairGate}}
	if got := GatePairings(all); !reflect.DeepEqual(got, want) {
		t.Errorf("pairings %+v, want %+v", got, want)
	}
	if got := PolicyPairings(all); !reflect.DeepEqual(got, []Pairing{{Arm: "wmrl-mixed", Base: "wmrl"}}) {
		t.Errorf("policy pairings %+v: a gated arm is compared with its ungated self only", got)
	}
	e := []int{16, 32, 48, 64}
	gated := pairedRun("wmrl-gate", 1, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil)
	for i := range gated.Steps {
		gated.Steps[i].GateOn = true
		gated.Steps[i].Gate.Closed = i < 1
	}
	cs, err := Paired([]Result{pairedRun(ArmRealGRPO, 1, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil), gated,
		pairedRun("wmrl", 1, 0, e, []float64{0.5, 0.8, 0.9, 1}, nil, nil)}, want[:1], 0.9, 8)
	if err != nil {
		t.Fatal(err)
	}
	if c := cs[0]; c.Arm.GateClosed != 0.25 || !math.IsNaN(c.Base.GateClosed) || c.Verdict != VerdictNeutral {
		t.Errorf("gate closed %v / %v, verdict %s; want 0.25 / NaN, neutral", c.Arm.GateClosed, c.Base.GateClosed, c.Verdict)
	}
}
