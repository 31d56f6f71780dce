package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wmrl/wmrl/correction"
)

// ErrUnknownArm is returned by ArmsByName for a name that is not a standard arm.
var ErrUnknownArm = errors.New("sim: unknown arm")

// Arm is one training configuration: which groups are executed and how the correction core treats
// the world model's scores.
type Arm struct {
	Name string
	// AnchorFraction is the fraction of groups executed for real (topics.IsAnchor); 1 executes
	// every group (real-GRPO), 0 none (pure world model).
	AnchorFraction float64
	Correction     correction.Config
	// Policy chooses the anchor groups (policy.go); the zero value is today's random choice.
	Policy AnchorPolicy
}

// Standard arm names, in the order Arms returns them.
const (
	ArmRealGRPO  = "real-grpo"
	ArmPureWM    = "pure-wm"
	ArmNone      = "none"
	ArmIVD       = "ivd"
	ArmOD        = "od"
	ArmWMRL      = "wmrl"
	ArmReference = "reference"
)

// Arms returns the standard arms of a sweep for the given anchor fraction: real-GRPO (every group
// executed, no correction, so every row has weight 1), pure world model (no anchors, no
// correction), the paper's ablation (anchors with none / IVD only / OD only / OD+IVD in wmrl's
// default mode) and the authors' reference mode.
func Arms(anchorFraction float64) []Arm {
	off := func(debias, denoise bool) correction.Config {
		c := correction.DefaultConfig()
		c.Debias, c.Denoise = debias, denoise
		return c
	}
	return []Arm{
		{Name: ArmRealGRPO, AnchorFraction: 1, Correction: off(false, false)},
		{Name: ArmPureWM, AnchorFraction: 0, Correction: off(false, false)},
		{Name: ArmNone, AnchorFraction: anchorFraction, Correction: off(false, false)},
		{Name: ArmIVD, AnchorFraction: anchorFraction, Correction: off(false, true)},
		{Name: ArmOD, AnchorFraction: anchorFraction, Correction: off(true, false)},
		{Name: ArmWMRL, AnchorFraction: anchorFraction, Correction: correction.DefaultConfig()},
		{Name: ArmReference, AnchorFraction: anchorFraction, Correction: correction.ReferenceConfig()},
	}
}

// WithMap returns arms with the calibration map k in place of the isotonic map on every
// default-mode arm that debiases; those arms are renamed "<name>-<map>" (wmrl-zspace), so a
// report says which map it ran. The z-space map brings its own settings (correction.ZSpaceConfig:
// 12 quantile bins, 400 pairs before the first fit). k = MapIsotonic returns arms unchanged.
func WithMap(arms []Arm, k correction.MapKind) []Arm {
	out := make([]Arm, len(arms))
	for i, a := range arms {
		c := a.Correction
		if k != correction.MapIsotonic && c.Mode == correction.ModeDefault && c.Debias && c.Map == correction.MapIsotonic {
			if k == correction.MapZSpace {
				z := correction.ZSpaceConfig()
				c.Bins, c.MinPairs = z.Bins, z.MinPairs
			}
			c.Map = k
			a.Name += "-" + k.String()
			a.Correction = c
		}
		out[i] = a
	}
	return out
}

// ArmNames lists the standard arm names.
func ArmNames() []string {
	var out []string
	for _, a := range Arms(0.25) {
		out = append(out, a.Name)
	}
	return out
}

// ArmsByName selects standard arms by name, in the order given; real-GRPO is added first when
// missing because every other arm's target is defined relative to it.
func ArmsByName(names []string, anchorFraction float64) ([]Arm, error) {
	byName := map[string]Arm{}
	all := append(Arms(anchorFraction), GridArms(anchorFraction)...)
	all = append(all, WithMap(Arms(anchorFraction), correction.MapCentred)...)
	for _, a := range append(all, WithMap(Arms(anchorFraction), correction.MapZSpace)...) {
		byName[a.Name] = a
	}
	var out []Arm
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		a, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("%w %q (have %s)", ErrUnknownArm, n, strings.Join(append(ArmNames(), ArmWMRLCentred, "od-centred", "wmrl-centred", "od-zspace", "wmrl-zspace"), ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, a)
		}
	}
	if !seen[ArmRealGRPO] {
		out = append([]Arm{byName[ArmRealGRPO]}, out...)
	}
	return out, nil
}

// WithAdvantage returns arms with the advantage estimator k on every arm, real-GRPO included: the
// target of an estimator's arms is real-GRPO trained with the same estimator. Arm names are
// unchanged; a report keeps estimators apart by its own axis (docs/anchors.md, "Settings").
func WithAdvantage(arms []Arm, k correction.AdvantageKind) []Arm {
	out := make([]Arm, len(arms))
	for i, a := range arms {
		a.Correction.Advantage = k
		out[i] = a
	}
	return out
}

// ArmGateSuffix marks an arm that runs with the trust gate (correction.Config.TrustGate).
const ArmGateSuffix = "-gate"

// gateable reports whether the trust gate can act on arm a: it has both anchors and world-model
// rows (0 < f < 1) and corrects in the default mode (the reference mode is the authors' loop).
func gateable(a Arm) bool {
	return a.AnchorFraction > 0 && a.AnchorFraction < 1 && a.Correction.Mode == correction.ModeDefault
}

// WithTrustGate returns arms under each gate setting of modes (false: off, true: on), in that
// order: off keeps arms as they are; on runs every gateable arm with the trust gate as
// "<name>-gate" (wmrl-gate, wmrl-mixed-gate). Arms the gate cannot act on (real-GRPO, pure world
// model, reference) appear once. Gated and ungated arms of a seed share its run id, so their
// random anchors, problems and sampler seed are the same. No modes returns arms unchanged.
func WithTrustGate(arms []Arm, modes []bool) []Arm {
	var out []Arm
	seen := map[string]bool{}
	add := func(a Arm) {
		if !seen[a.Name] {
			seen[a.Name] = true
			out = append(out, a)
		}
	}
	if len(modes) == 0 {
		return arms
	}
	for _, on := range modes {
		for _, a := range arms {
			switch {
			case !gateable(a):
				add(a)
			case on:
				a.Correction.TrustGate = true
				a.Name += ArmGateSuffix
				add(a)
			default:
				add(a)
			}
		}
	}
	return out
}
