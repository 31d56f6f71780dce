package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/task"
)

// Arms of the calibration-bias family, named by their map (docs/error_grid.md).
const (
	ArmMapOff      = "off"
	ArmMapIsotonic = "isotonic"
	ArmMapCentred  = "centred"
	ArmMapZSpace   = "zspace"
)

// DefaultCalibrationShapes are the family's judge distortions, fixed in
// docs/error_grid.md before the run: identity, convex, concave, and the
// affine squash GRPO must cancel.
var DefaultCalibrationShapes = []Distortion{Power(1), Power(2), Power(0.5), Affine(0.3, 0.4)}

// DefaultCalibrationNoise is the family's σ, fixed in docs/error_grid.md.
const DefaultCalibrationNoise = 0.05

// CalibrationArms are the family's arms for one estimator: real-GRPO for the
// target, then OD-only arms (IVD off, so the map is their only difference)
// with the map off, isotonic, centred and z-space (the authors' settings).
func CalibrationArms(anchorFraction float64, est correction.AdvantageKind) []Arm {
	od := func(debias bool, k correction.MapKind) correction.Config {
		c := correction.DefaultConfig()
		if k == correction.MapZSpace {
			c = correction.ZSpaceConfig()
		}
		c.Map, c.Debias, c.Denoise, c.Advantage = k, debias, false, est
		return c
	}
	real := od(false, correction.MapIsotonic)
	return []Arm{
		{Name: ArmRealGRPO, AnchorFraction: 1, Correction: real},
		{Name: ArmMapOff, AnchorFraction: anchorFraction, Correction: od(false, correction.MapIsotonic)},
		{Name: ArmMapIsotonic, AnchorFraction: anchorFraction, Correction: od(true, correction.MapIsotonic)},
		{Name: ArmMapCentred, AnchorFraction: anchorFraction, Correction: od(true, correction.MapCentred)},
		{Name: ArmMapZSpace, AnchorFraction: anchorFraction, Correction: od(true, correction.MapZSpace)},
	}
}

// CalibrationGrid sweeps the calibration-bias family r̂ = g(r) + σ·ξ over
// shapes × estimators; every cell runs CalibrationArms × Seeds. One score
// cache serves every cell.
type CalibrationGrid struct {
	Config         Config
	Shapes         []Distortion
	Estimators     []correction.AdvantageKind
	Noise          float64
	AnchorFraction float64
	Seeds          []int64
	Workers        int
	TargetFraction float64 // 0 means DefaultTargetFraction
}

// CalibrationCell is one (shape, estimator) cell.
type CalibrationCell struct {
	Shape     Distortion
	Estimator correction.AdvantageKind
	Results   []Result
	Summary   []ArmSummary
	// Shift (per Summary arm) is the debias shift averaged over the last half
	// of each run, then over seeds; VsOff is the final score minus the off
	// arm's, paired by seed.
	Shift, VsOff []Estimate
}

// Run runs the cells in order (shape outer, estimator inner). progress, if
// not nil, gets the cell index with every finished run.
func (g CalibrationGrid) Run(ctx context.Context, eval *task.EvalSet, progress func(cell int, p Progress)) ([]CalibrationCell, error) {
	if len(g.Shapes) == 0 || len(g.Estimators) == 0 {
		return nil, fmt.Errorf("%w: calibration grid needs at least one shape and one estimator", ErrConfig)
	}
	cache := NewScoreCache()
	var cells []CalibrationCell
	for _, shape := range g.Shapes {
		for _, est := range g.Estimators {
			cfg := g.Config
			d := shape
			cfg.ErrorModel = &ErrorModel{Noise: g.Noise, Distortion: &d, Scores: cache}
			sw := Sweep{Config: cfg, Arms: CalibrationArms(g.AnchorFraction, est), Seeds: g.Seeds, Workers: g.Workers}
			res, sum, err := runCell(ctx, eval, sw, len(cells), g.TargetFraction, progress)
			if err != nil {
				return nil, fmt.Errorf("sim: calibration grid %s %s: %w", shape, est, err)
			}
			c := CalibrationCell{Shape: shape, Estimator: est, Results: res, Summary: sum}
			c.Shift, c.VsOff = shiftAndVsOff(res, c.Summary)
			cells = append(cells, c)
		}
	}
	return cells, nil
}

// LateShift is the mean debias shift over the last half of r's steps.
func LateShift(r Result) float64 {
	n := len(r.Steps)
	if n == 0 {
		return 0
	}
	var sum float64
	for _, s := range r.Steps[n/2:] {
		sum += s.DebiasShift
	}
	return sum / float64(n-n/2)
}

func shiftAndVsOff(res []Result, sums []ArmSummary) (shift, vsOff []Estimate) {
	off := map[int64]float64{}
	for _, r := range res {
		if r.Arm == ArmMapOff {
			off[r.Seed] = r.FinalScore()
		}
	}
	for _, s := range sums {
		var sh, d []float64
		for _, r := range res {
			if r.Arm != s.Arm {
				continue
			}
			sh = append(sh, LateShift(r))
			if o, ok := off[r.Seed]; ok {
				d = append(d, r.FinalScore()-o)
			}
		}
		shift, vsOff = append(shift, NewEstimate(sh)), append(vsOff, NewEstimate(d))
	}
	return shift, vsOff
}

// CalibrationHeader is the header of WriteCalibrationCSV; CIs are 95%
// half-widths (Student t over seeds).
var CalibrationHeader = []string{
	"shape", "estimator", "arm", "seeds", "final_mean", "final_ci", "vs_off_mean", "vs_off_ci",
	"reached", "executions_to_target_mean", "executions_to_target_ci", "shift_mean", "shift_ci",
}

// WriteCalibrationCSV writes one row per cell × arm.
func WriteCalibrationCSV(w io.Writer, cells []CalibrationCell) error {
	f := csvFloat
	var rows [][]string
	for _, c := range cells {
		for i, s := range c.Summary {
			rows = append(rows, []string{c.Shape.String(), c.Estimator.String(), s.Arm, strconv.Itoa(s.Seeds),
				f(s.Final.Mean), f(s.Final.CI), f(c.VsOff[i].Mean), f(c.VsOff[i].CI),
				strconv.Itoa(s.Reached), f(s.ExecutionsToTarget.Mean), f(s.ExecutionsToTarget.CI),
				f(c.Shift[i].Mean), f(c.Shift[i].CI)})
		}
	}
	return writeCSV(w, CalibrationHeader, rows)
}

// CalibrationTable writes one Markdown table per estimator: a row per
// shape × arm with final score, final minus off's (paired), executions-to-
// target and the late-half debias shift, each mean ± 95% CI over seeds. A
// "vs off" whose CI lies wholly above 0 is marked with ▲, wholly below with ▼.
func CalibrationTable(w io.Writer, cells []CalibrationCell) error {
	var ests []correction.AdvantageKind
	for _, c := range cells {
		if !slices.Contains(ests, c.Estimator) {
			ests = append(ests, c.Estimator)
		}
	}
	for _, est := range ests {
		if _, err := fmt.Fprintf(w, "\n%s — mean ± 95%% CI over seeds; vs off = final − off's final, paired by seed; shift = debias_shift over the last half of the run\n\n"+
			"| g(r) | map | final | vs off | executions-to-target (reached) | debias shift |\n|---|---|---|---|---|---|\n", est); err != nil {
			return err
		}
		for _, c := range cells {
			if c.Estimator != est {
				continue
			}
			for i, s := range c.Summary {
				mark := ""
				switch v := c.VsOff[i]; {
				case s.Arm == ArmMapOff || s.Arm == ArmRealGRPO || !(v.CI >= 0):
				case v.Mean-v.CI > 0:
					mark = " ▲"
				case v.Mean+v.CI < 0:
					mark = " ▼"
				}
				if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s%s | %s (%d/%d) | %s |\n", c.Shape, s.Arm, s.Final.Format(3),
					signed(c.VsOff[i]), mark, s.ExecutionsToTarget.Format(0), s.Reached, s.Seeds, c.Shift[i].Format(3)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
