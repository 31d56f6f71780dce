package demo

import (
	"cmp"
	"fmt"
	"html/template"
	"math"

	"github.com/wmrl/wmrl/dashboard"
	"github.com/wmrl/wmrl/sim"
)

// headline is the top of the report's results: the one arm the run is about (the calibration arm,
// wmrl by default) against real-GRPO, as the three numbers a reader looks for first.
type headline struct {
	Arm, Real            string
	Speedup, SpeedupNote string
	Final, RealFinal     string
	Execs, RealExecs     string
}

// newHeadline picks the headline arm: prefer, else the first arm that is not real-GRPO. It returns
// nil when the report has no such arm (a real-GRPO-only run has nothing to compare).
func newHeadline(sums []sim.ArmSummary, prefer string) *headline {
	var arm, first, real *sim.ArmSummary
	for i := range sums {
		switch s := &sums[i]; {
		case s.Arm == sim.ArmRealGRPO:
			real = s
		case s.Arm == prefer:
			arm = s
		case first == nil:
			first = s
		}
	}
	arm = cmp.Or(arm, first)
	if arm == nil {
		return nil
	}
	h := &headline{Arm: arm.Arm, Real: sim.ArmRealGRPO, Final: arm.Final.Format(3), Execs: arm.Executions.Format(0)}
	switch {
	case real == nil:
		h.Speedup, h.SpeedupNote = "—", "no real-GRPO arm in this run to compare with"
	case arm.Reached == 0:
		h.Speedup, h.SpeedupNote = "not reached", fmt.Sprintf("%s did not reach the target in any seed", arm.Arm)
	case arm.Speedup.N == 0:
		h.Speedup, h.SpeedupNote = "∞", "target reached without a single real execution"
	default:
		h.Speedup = fmt.Sprintf("%.2f×", arm.Speedup.Mean)
		h.SpeedupNote = fmt.Sprintf("fewer real executions to the target (reached in %d/%d seeds)", arm.Reached, arm.Seeds)
		if !math.IsNaN(arm.Speedup.CI) {
			h.SpeedupNote += fmt.Sprintf("; 95%% CI ± %.2f", arm.Speedup.CI)
		}
	}
	if real != nil {
		h.RealFinal, h.RealExecs = real.Final.Format(3), real.Executions.Format(0)
	}
	return h
}

// swatch is the arm's colour as a CSS value, for the legend squares in the page's tables.
func swatch(arm string) template.CSS {
	c := sim.ArmColor(arm)
	return template.CSS(fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B))
}

// Headline is the finished demo's result as the dashboard shows it (what `wmrl demo` prints last).
func (o Outcome) Headline() dashboard.Headline {
	h := dashboard.Headline{Line: o.FinalLine, Arms: []dashboard.HeadlineArm{}}
	for _, s := range o.Summary {
		h.Arms = append(h.Arms, dashboard.NewHeadlineArm(s.Arm, s.Final.Mean, s.Executions.Mean, s.ExecutionsToTarget.Mean, s.Speedup.Mean))
	}
	return h
}
