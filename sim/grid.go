package sim

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/task"
)

// ArmWMRLCentred is OD+IVD with the strictly increasing centred-isotonic map.
const ArmWMRLCentred = "wmrl-cir"

// GridArms are the arms of the error grid (docs/error_grid.md): real-GRPO,
// pure world model, and with the anchor fraction none, OD, IVD, OD+IVD and
// OD+IVD with the centred map.
func GridArms(anchorFraction float64) []Arm {
	var out []Arm
	for _, a := range Arms(anchorFraction) {
		if a.Name != ArmReference {
			out = append(out, a)
		}
	}
	cir := correction.DefaultConfig()
	cir.Map = correction.MapCentred
	return append(out, Arm{Name: ArmWMRLCentred, AnchorFraction: anchorFraction, Correction: cir})
}

// ErrorGrid sweeps the error model's (bias, noise) grid: every cell runs
// every arm × seed with Config.ErrorModel set to the cell. One score cache is
// shared by all cells and arms, since a seed's problems are the same in each.
type ErrorGrid struct {
	Config         Config
	Biases, Noises []float64
	Arms           []Arm
	Seeds          []int64
	Workers        int
	TargetFraction float64 // 0 means DefaultTargetFraction
	// Adversarial makes every cell's judge read −r (ErrorModel.Adversarial).
	Adversarial bool
}

// GridCell is one (bias, noise) cell: its runs and their summaries.
type GridCell struct {
	Bias, Noise float64
	Results     []Result
	Summary     []ArmSummary
}

// Run runs the cells in order (bias outer, noise inner). progress, if not
// nil, gets the cell index with every finished run.
func (g ErrorGrid) Run(ctx context.Context, eval *task.EvalSet, progress func(cell int, p Progress)) ([]GridCell, error) {
	if len(g.Biases) == 0 || len(g.Noises) == 0 {
		return nil, fmt.Errorf("%w: error grid needs at least one bias and one noise level", ErrConfig)
	}
	cache := NewScoreCache()
	var cells []GridCell
	for _, b := range g.Biases {
		for _, n := range g.Noises {
			cfg := g.Config
			cfg.ErrorModel = &ErrorModel{Bias: b, Noise: n, Adversarial: g.Adversarial, Scores: cache}
			sw := Sweep{Config: cfg, Arms: g.Arms, Seeds: g.Seeds, Workers: g.Workers}
			res, sum, err := runCell(ctx, eval, sw, len(cells), g.TargetFraction, progress)
			if err != nil {
				return nil, fmt.Errorf("sim: error grid bias %g noise %g: %w", b, n, err)
			}
			cells = append(cells, GridCell{Bias: b, Noise: n, Results: res, Summary: sum})
		}
	}
	return cells, nil
}

// runCell runs cell k of a grid (ErrorGrid, CalibrationGrid) and summarizes
// it against targetFraction (0 means DefaultTargetFraction); progress, if
// not nil, gets k with every finished run.
func runCell(ctx context.Context, eval *task.EvalSet, sw Sweep, k int, targetFraction float64, progress func(cell int, p Progress)) ([]Result, []ArmSummary, error) {
	res, err := sw.Run(ctx, eval, func(p Progress) {
		if progress != nil {
			progress(k, p)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return res, Summarize(res, cmp.Or(targetFraction, DefaultTargetFraction)), nil
}

// GridHeader is the header of WriteErrorGridCSV. CIs are 95% half-widths
// (Student t over seeds); the to-target statistics are over the seeds that
// reached the target, counted in reached.
var GridHeader = []string{
	"bias", "noise", "arm", "seeds", "final_mean", "final_ci", "delta_vs_real_mean", "delta_vs_real_ci",
	"reached", "executions_to_target_mean", "executions_to_target_ci", "speedup_mean", "speedup_ci",
	"executions_total_mean", "gate_closed_mean", "gate_closed_ci",
}

// WriteErrorGridCSV writes one row per cell × arm.
func WriteErrorGridCSV(w io.Writer, cells []GridCell) error {
	f := csvFloat
	var rows [][]string
	for _, c := range cells {
		for _, s := range c.Summary {
			rows = append(rows, []string{
				f(c.Bias), f(c.Noise), s.Arm, strconv.Itoa(s.Seeds),
				f(s.Final.Mean), f(s.Final.CI), f(s.FinalDelta.Mean), f(s.FinalDelta.CI),
				strconv.Itoa(s.Reached), f(s.ExecutionsToTarget.Mean), f(s.ExecutionsToTarget.CI),
				f(s.Speedup.Mean), f(s.Speedup.CI), f(s.Executions.Mean),
				f(s.GateClosed.Mean), f(s.GateClosed.CI),
			})
		}
	}
	return writeCSV(w, GridHeader, rows)
}

// GridTable writes a Markdown table per noise level: rows are arms, columns
// bias levels, cells "final − real-GRPO ± CI (speedup)".
func GridTable(w io.Writer, cells []GridCell) error {
	biases, noises := gridAxes(cells)
	seen := map[[2]float64]*GridCell{}
	for i := range cells {
		seen[[2]float64{cells[i].Bias, cells[i].Noise}] = &cells[i]
	}
	for _, n := range noises {
		if _, err := fmt.Fprintf(w, "\nσ = %g — final score minus real-GRPO's (mean ± 95%% CI over seeds); speedup in executions-to-target, seeds reaching the target\n\n| arm |", n); err != nil {
			return err
		}
		for _, b := range biases {
			fmt.Fprintf(w, " B = %g |", b)
		}
		fmt.Fprint(w, "\n|---|")
		for range biases {
			fmt.Fprint(w, "---|")
		}
		fmt.Fprintln(w)
		first := seen[[2]float64{biases[0], n}]
		if first == nil {
			continue
		}
		for _, arm := range first.Summary {
			fmt.Fprintf(w, "| %s |", arm.Arm)
			for _, b := range biases {
				c := seen[[2]float64{b, n}]
				s := findArm(c, arm.Arm)
				if s == nil {
					fmt.Fprint(w, " — |")
					continue
				}
				sp := "—"
				switch {
				case s.Arm == ArmPureWM && s.Reached > 0:
					sp = "∞"
				case !math.IsNaN(s.Speedup.Mean):
					sp = s.Speedup.Format(2) + "×"
				}
				fmt.Fprintf(w, " %s (%s, %d/%d) |", signed(s.FinalDelta), sp, s.Reached, s.Seeds)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

func signed(e Estimate) string { return signedFormat(e, 3) }

func findArm(c *GridCell, arm string) *ArmSummary {
	if c == nil {
		return nil
	}
	for i := range c.Summary {
		if c.Summary[i].Arm == arm {
			return &c.Summary[i]
		}
	}
	return nil
}
