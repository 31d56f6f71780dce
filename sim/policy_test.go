package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// TestPropensities checks π_g against docs/anchors.md's formulas on hand-made uncertainties.
func TestPropensities(t *testing.T) {
	// u(x) = x, so a group's u_g is the mean of its scores.
	id := func(x float64) float64 { return x }
	preds := [][]float64{{1, 1}, {3, 3}} // u_g 1 and 3, ū = 2
	for _, tc := range []struct {
		name  string
		p     AnchorPolicy
		f     float64
		preds [][]float64
		want  []float64
	}{
		{"random", PolicyRandom, 0.25, preds, []float64{0.25, 0.25}},
		{"routed", PolicyRouted, 0.25, preds, []float64{0.125, 0.375}},
		{"routed-noipw same choice", PolicyRoutedNoIPW, 0.25, preds, []float64{0.125, 0.375}},
		{"routed clips at 1", PolicyRouted, 0.8, preds, []float64{0.4, 1}},
		{"routed floor", PolicyRouted, 0.25, [][]float64{{0}, {1}}, []float64{PropensityFloor, 0.5}},
		{"routed with ū = 0", PolicyRouted, 0.25, [][]float64{{0}, {0}}, []float64{0.25, 0.25}},
		{"mixed", PolicyMixed, 0.25, preds, []float64{0.1875, 0.3125}},
		{"mixed-noipw", PolicyMixedNoIPW, 0.8, preds, []float64{0.6, 0.9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.propensities(tc.f, id, tc.preds)
			for g := range got {
				if math.Abs(got[g]-tc.want[g]) > 1e-15 {
					t.Fatalf("π = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestParseAnchorPolicy(t *testing.T) {
	for i, n := range AnchorPolicyNames() {
		p, err := ParseAnchorPolicy(" " + n + " ")
		if err != nil || p != AnchorPolicy(i) || p.String() != n {
			t.Fatalf("%q: %v, %v", n, p, err)
		}
	}
	if _, err := ParseAnchorPolicy("uncertain"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown name: %v", err)
	}
}

// TestWithPolicy: only anchored default-mode arms with an isotonic or centred map take a policy
// and are renamed; random changes nothing.
func TestWithPolicy(t *testing.T) {
	arms := append(Arms(0.25), WithMap(Arms(0.25), correction.MapZSpace)...)
	var names []string
	for _, a := range WithPolicy(arms, PolicyRouted) {
		if a.Policy == PolicyRouted {
			names = append(names, a.Name)
		}
	}
	want := []string{"none-routed", "ivd-routed", "od-routed", "wmrl-routed", "none-routed", "ivd-routed"}
	if !slices.Equal(names, want) {
		t.Fatalf("routed arms %v, want %v", names, want)
	}
	if got := WithPolicy(arms, PolicyRandom); !slices.EqualFunc(got, arms, func(a, b Arm) bool { return a.Name == b.Name && a.Policy == b.Policy }) {
		t.Fatal("random policy changed arms")
	}
}

// TestPolicyRuns runs the wmrl arm under every policy: the step-0 choice of every policy is
// random's (an empty window gives every score u = 1), weighted policies record their largest
// weight and the others none, and a policy on an arm that cannot take one is a config error.
func TestPolicyRuns(t *testing.T) {
	eval := evalSet(t)
	cfg := tiny()
	cfg.Steps, cfg.Groups = 4, 8
	base := armNamed(t, ArmWMRL)
	run := RunID(5)
	for p := range AnchorPolicy(len(policyNames)) {
		t.Run(p.String(), func(t *testing.T) {
			arm := WithPolicy([]Arm{base}, p)[0]
			res, err := Run(context.Background(), cfg, arm, eval, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			want0 := 0
			for j := range cfg.Groups {
				if topics.IsAnchor(run, topics.GroupID(0, j), base.AnchorFraction) {
					want0++
				}
			}
			if got := res.Steps[0].AnchorGroups; got != want0 {
				t.Errorf("step 0: %d anchor groups, want random's %d", got, want0)
			}
			for _, s := range res.Steps {
				switch {
				case p.weighted() && s.AnchorGroups > 0 && !(s.MaxPropensityWeight >= 1):
					t.Errorf("step %d: %d anchors, max weight %v", s.Step, s.AnchorGroups, s.MaxPropensityWeight)
				case !p.weighted() && s.MaxPropensityWeight != 0:
					t.Errorf("step %d: unweighted policy with weight %v", s.Step, s.MaxPropensityWeight)
				}
			}
		})
	}
	bad := armNamed(t, ArmRealGRPO)
	bad.Policy = PolicyRouted
	if _, err := Run(context.Background(), cfg, bad, eval, 5, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("routed real-grpo: %v, want ErrConfig", err)
	}
}
