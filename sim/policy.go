package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// ErrUnknownPolicy is returned by ParseAnchorPolicy for a name that is not an anchor policy.
var ErrUnknownPolicy = errors.New("sim: unknown anchor policy")

// AnchorPolicy decides which groups of a step are executed for real (docs/anchors.md,
// "Policies"). Every policy gives each group a probability π_g from what is known before it is
// executed and makes it an anchor iff topics.AnchorHash(run, group) < π_g: the same uniform draw
// per (run, group) for every policy of a seed, so policies differ by their π, not by luck.
type AnchorPolicy uint8

const (
	// PolicyRandom is today's choice, π_g = f (topics.IsAnchor); its pairs carry unit weight, so
	// every output is bit-for-bit what it was before policies existed.
	PolicyRandom AnchorPolicy = iota
	// PolicyRouted: π_g = min(1, max(π_min, f·u_g/ū)), u_g the mean over the group's rollouts of
	// the map's local standard error at their world-model scores (correction.MapUncertainty), ū
	// its mean over the step's groups; pairs carry w_g = 1/π_g.
	PolicyRouted
	// PolicyMixed: π_g = ½·f + ½·π_g^routed, a random floor bounding the weights by 2/f.
	PolicyMixed
	// PolicyRoutedNoIPW and PolicyMixedNoIPW choose as routed and mixed without the weights: the
	// controls that show what the weights buy, not candidates for the pipeline.
	PolicyRoutedNoIPW
	PolicyMixedNoIPW
)

// PropensityFloor is π_min, the smallest selection probability of the routed policy: it bounds
// the inverse-propensity weights by 50 and keeps every group choosable.
const PropensityFloor = 0.02

var policyNames = []string{"random", "routed", "mixed", "routed-noipw", "mixed-noipw"}

func (p AnchorPolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("AnchorPolicy(%d)", uint8(p))
}

// AnchorPolicyNames lists the policy names ParseAnchorPolicy accepts.
func AnchorPolicyNames() []string { return append([]string(nil), policyNames...) }

// ParseAnchorPolicy parses a policy name (case-insensitive).
func ParseAnchorPolicy(s string) (AnchorPolicy, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i, n := range policyNames {
		if n == s {
			return AnchorPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (have %s)", ErrUnknownPolicy, s, strings.Join(policyNames, ", "))
}

// weighted reports whether the policy's anchor pairs carry inverse-propensity weights.
func (p AnchorPolicy) weighted() bool { return p == PolicyRouted || p == PolicyMixed }

// propensities returns π_g for groups whose rollouts' world-model scores are preds[g], at anchor
// fraction f, with u(x) the uncertainty of the map before the step (correction.MapUncertainty.At).
// PolicyRandom gives f for all and does not call u.
func (p AnchorPolicy) propensities(f float64, u func(x float64) float64, preds [][]float64) []float64 {
	pi := make([]float64, len(preds))
	if p == PolicyRandom {
		for g := range pi {
			pi[g] = f
		}
		return pi
	}
	ug := make([]float64, len(preds))
	var mean float64
	for g, xs := range preds {
		for _, x := range xs {
			ug[g] += u(x)
		}
		if len(xs) > 0 {
			ug[g] /= float64(len(xs))
		}
		mean += ug[g] / float64(len(preds))
	}
	for g := range pi {
		routed := f
		if mean > 0 {
			// ū = 0 (a window fitted without residual) says nothing about where to look.
			routed = min(1, max(PropensityFloor, f*ug[g]/mean))
		}
		pi[g] = routed
		if p == PolicyMixed || p == PolicyMixedNoIPW {
			pi[g] = 0.5*f + 0.5*routed
		}
	}
	return pi
}

// chooses reports whether group gid of run is an anchor at propensity pi under p.
func (p AnchorPolicy) chooses(run, gid string, f, pi float64) bool {
	if p == PolicyRandom {
		return topics.IsAnchor(run, gid, f)
	}
	return topics.AnchorHash(run, gid) < pi
}

// WithPolicy returns arms with policy p on every arm that can take one: anchored (0 < f < 1) and
// correcting in default mode with an isotonic or centred map (the z-space window holds
// standardised pairs, reference mode the authors' unweighted loop). Those arms are renamed
// "<name>-<policy>" (wmrl-routed); the others, and every arm under PolicyRandom, are unchanged.
func WithPolicy(arms []Arm, p AnchorPolicy) []Arm {
	out := make([]Arm, len(arms))
	for i, a := range arms {
		c := a.Correction
		if p != PolicyRandom && a.AnchorFraction > 0 && a.AnchorFraction < 1 &&
			c.Mode == correction.ModeDefault && c.Map != correction.MapZSpace {
			a.Policy = p
			a.Name += "-" + p.String()
		}
		out[i] = a
	}
	return out
}

// WithPolicies returns arms under each policy of ps in turn (WithPolicy): the first policy's
// arms, then for every further policy the arms it renames, so arms no policy applies to
// (real-GRPO, pure world model) appear once. Arms named twice are kept once.
func WithPolicies(arms []Arm, ps []AnchorPolicy) []Arm {
	if len(ps) == 0 {
		return arms
	}
	out := WithPolicy(arms, ps[0])
	seen := map[string]bool{}
	for _, a := range out {
		seen[a.Name] = true
	}
	for _, p := range ps[1:] {
		for _, a := range WithPolicy(arms, p) {
			if a.Policy == p && !seen[a.Name] {
				seen[a.Name] = true
				out = append(out, a)
			}
		}
	}
	return out
}
