package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/task"
)

// errorGridOptions are the knobs of `wmrl simulate --error-grid` beyond the
// simulate flags it shares (docs/error_grid.md fixes their defaults).
type errorGridOptions struct {
	biases, noises []float64
	armsChanged    bool
	mapKind        correction.MapKind // simulate --map, applied to the default grid arms too
	// family "bias" is the B×σ grid; "calibration" the calibration-bias family
	// r̂ = g(r) + σ·ξ over shapes × estimators × maps (docs/error_grid.md).
	family     string
	calNoise   float64
	estimators []string
	// estimatorsChanged: --grid-estimators was given, which makes it an axis of the bias family
	// too (docs/anchors.md, "Settings"); by default the bias family runs the arms' own (grpo).
	estimatorsChanged bool
	// adversarial: the bias family's judge reads −r (docs/anchors.md, "Gate cells").
	adversarial bool
}

// Error-grid families.
const (
	gridFamilyBias        = "bias"
	gridFamilyCalibration = "calibration"
)

// gridFlags binds the flags of the calibration-bias family.
func gridFlags(f *pflag.FlagSet, g *errorGridOptions) {
	f.StringVar(&g.family, "grid-family", gridFamilyBias, "error grid family: bias (B×σ, r̂ = r + b(τ) + ξ) or calibration "+
		"(r̂ = g(r) + σ·ξ for g ∈ r, r², √r, 0.3+0.4r × --grid-estimators × maps off, isotonic, centred, zspace on OD-only arms)")
	f.Float64Var(&g.calNoise, "grid-calibration-noise", sim.DefaultCalibrationNoise, "calibration family: noise σ")
	f.BoolVar(&g.adversarial, "grid-adversarial", false, "bias family: an adversarial judge r̂ = −r + b(τ) + ξ that ranks rollouts backwards")
	f.StringSliceVar(&g.estimators, "grid-estimators", []string{"grpo", "drgrpo"}, "advantage estimators (grpo, drgrpo): an axis of the calibration family; "+
		"of the bias family only when given (each estimator's tables then go to --out/<estimator>/)")
}

// Grid defaults, fixed in docs/error_grid.md before the grid was run.
var (
	defaultGridBiases = []float64{0, 0.15, 0.3}
	defaultGridNoises = []float64{0, 0.15, 0.3}
)

const defaultGridSteps = 40

// runErrorGrid sweeps the error model's (B, σ) grid and writes error_grid.csv,
// error_grid.md and the plots into --out; cfg and seeds are simulate's, resolved.
func (o *simulateOptions) runErrorGrid(ctx context.Context, cfg sim.Config, arms []sim.Arm, seeds []int64) error {
	a, g0, out := o.a, o.grid, o.out
	switch g0.family {
	case gridFamilyBias:
	case gridFamilyCalibration:
		if slices.Contains(o.gates, true) {
			return fmt.Errorf("--trust-gate on: the calibration family's arms are fixed (OD only, per map); use --grid-family bias")
		}
		return o.runCalibrationGrid(ctx, cfg, seeds)
	default:
		return fmt.Errorf("--grid-family %q: want %s or %s", g0.family, gridFamilyBias, gridFamilyCalibration)
	}
	if !g0.armsChanged {
		arms = sim.WithTrustGate(sim.WithPolicies(sim.WithMap(sim.GridArms(o.anchorFraction), g0.mapKind), o.policies), o.gates)
	}
	// Without --grid-estimators the arms keep their own estimator and the tables go to out itself.
	ests := []correction.AdvantageKind{arms[0].Correction.Advantage}
	if g0.estimatorsChanged {
		var err error
		if ests, err = parseEstimators(g0.estimators); err != nil {
			return err
		}
	}
	for _, b := range g0.biases {
		for _, n := range g0.noises {
			if err := (sim.ErrorModel{Bias: b, Noise: n}).Validate(); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	eval, err := o.gridEval(ctx)
	if err != nil {
		return err
	}
	pairings := append(sim.PolicyPairings(arms), sim.GatePairings(arms)...)
	var blocks []sim.PairedBlock
	for _, est := range ests {
		estArms, estOut := arms, out
		if g0.estimatorsChanged {
			estArms = sim.WithAdvantage(arms, est)
			if out != "" {
				estOut = filepath.Join(out, est.String())
			}
		}
		res, err := o.runBiasGrid(ctx, cfg, eval, estArms, seeds, est, estOut, start)
		if err != nil {
			return err
		}
		for _, c := range res {
			if len(pairings) == 0 {
				break
			}
			cs, err := sim.Paired(c.Results, pairings, cmp.Or(o.targetFraction, sim.DefaultTargetFraction), cfg.Groups)
			if err != nil {
				return err
			}
			blocks = append(blocks, sim.PairedBlock{Values: []string{est.String(), strconv.FormatFloat(c.Bias, 'g', -1, 64),
				strconv.FormatFloat(c.Noise, 'g', -1, 64)}, Comparisons: cs})
		}
	}
	if len(blocks) > 0 {
		title := func(b sim.PairedBlock) string {
			judge := ""
			if g0.adversarial {
				judge = ", adversarial judge r̂ = −r + b + ξ"
			}
			return fmt.Sprintf("estimator %s, B = %s, σ = %s%s", b.Values[0], b.Values[1], b.Values[2], judge)
		}
		if err := writePaired(a.stdout, out, []string{"estimator", "bias", "noise"}, blocks, title, o.targetFraction); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stdout, "error grid done in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// runBiasGrid runs the bias family's grid for one estimator's arms, prints its table and, with
// an estOut folder, writes error_grid.csv, error_grid.md and the plots there. Its progress
// lines count time from start.
func (o *simulateOptions) runBiasGrid(ctx context.Context, cfg sim.Config, eval *task.EvalSet, arms []sim.Arm, seeds []int64,
	est correction.AdvantageKind, estOut string, start time.Time) ([]sim.GridCell, error) {
	a, g0 := o.a, o.grid
	cells := len(g0.biases) * len(g0.noises)
	g := sim.ErrorGrid{Config: cfg, Biases: g0.biases, Noises: g0.noises, Arms: arms, Seeds: seeds,
		Workers: o.workers, TargetFraction: o.targetFraction, Adversarial: g0.adversarial}
	fmt.Fprintf(a.stdout, "eval set ready in %s; error grid %d cells (B %v × σ %v) × %d arms × %d seeds, %d steps × %d groups × G=%d, estimator %s\n",
		time.Since(start).Round(time.Millisecond), cells, g0.biases, g0.noises, len(arms), len(seeds), cfg.Steps, cfg.Groups, cfg.GroupSize, est)
	res, err := g.Run(ctx, eval, func(cell int, p sim.Progress) {
		fmt.Fprintf(a.stdout, "[%s cell %d/%d run %2d/%d] %-9s seed %-3d final %.3f executions %5d (%s)\n",
			est, cell+1, cells, p.Done, p.Total, p.Result.Arm, p.Result.Seed, p.Result.FinalScore(),
			last(p.Result).Executions, time.Since(start).Round(time.Second))
	})
	if err != nil {
		return nil, err
	}
	if err := sim.GridTable(a.stdout, res); err != nil {
		return nil, err
	}
	if estOut == "" {
		return res, nil
	}
	if err := writeGridTables(estOut, "error_grid", func(f *os.File) error { return sim.WriteErrorGridCSV(f, res) },
		func(f *os.File) error { return sim.GridTable(f, res) }); err != nil {
		return nil, err
	}
	files, err := sim.WriteGridPlots(estOut, res)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(a.stdout, "wrote error_grid.csv, error_grid.md and %d plots to %s\n", len(files), estOut)
	return res, nil
}

// runCalibrationGrid runs the calibration-bias family and writes
// calibration_grid.csv and calibration_grid.md into --out. --arms and --map
// do not apply: the family's arms are fixed (sim.CalibrationArms).
func (o *simulateOptions) runCalibrationGrid(ctx context.Context, cfg sim.Config, seeds []int64) error {
	a, g0, out := o.a, o.grid, o.out
	ests, err := parseEstimators(g0.estimators)
	if err != nil {
		return err
	}
	g := sim.CalibrationGrid{Config: cfg, Shapes: sim.DefaultCalibrationShapes, Estimators: ests, Noise: g0.calNoise,
		AnchorFraction: o.anchorFraction, Seeds: seeds, Workers: o.workers, TargetFraction: o.targetFraction}
	if err := (sim.ErrorModel{Noise: g0.calNoise}).Validate(); err != nil {
		return err
	}
	start := time.Now()
	eval, err := o.gridEval(ctx)
	if err != nil {
		return err
	}
	cells := len(g.Shapes) * len(ests)
	fmt.Fprintf(a.stdout, "eval set ready in %s; calibration grid %d cells (g %v × %v) × %d arms × %d seeds, σ %g, %d steps × %d groups × G=%d\n",
		time.Since(start).Round(time.Millisecond), cells, g.Shapes, g0.estimators, len(sim.CalibrationArms(0, 0)), len(seeds), g.Noise,
		cfg.Steps, cfg.Groups, cfg.GroupSize)
	res, err := g.Run(ctx, eval, func(cell int, p sim.Progress) {
		fmt.Fprintf(a.stdout, "[cell %d/%d run %2d/%d] %-9s seed %-3d final %.3f executions %5d shift %.3f (%s)\n",
			cell+1, cells, p.Done, p.Total, p.Result.Arm, p.Result.Seed, p.Result.FinalScore(),
			last(p.Result).Executions, sim.LateShift(p.Result), time.Since(start).Round(time.Second))
	})
	if err != nil {
		return err
	}
	if err := sim.CalibrationTable(a.stdout, res); err != nil {
		return err
	}
	if out != "" {
		if err := writeGridTables(out, "calibration_grid", func(f *os.File) error { return sim.WriteCalibrationCSV(f, res) },
			func(f *os.File) error { return sim.CalibrationTable(f, res) }); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "wrote calibration_grid.csv and calibration_grid.md to %s\n", out)
	}
	fmt.Fprintf(a.stdout, "calibration grid done in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// parseEstimators parses --grid-estimators.
func parseEstimators(names []string) ([]correction.AdvantageKind, error) {
	var ests []correction.AdvantageKind
	for _, name := range names {
		switch name {
		case "grpo":
			ests = append(ests, correction.GRPO)
		case "drgrpo":
			ests = append(ests, correction.DrGRPO)
		default:
			return nil, fmt.Errorf("--grid-estimators %q: want grpo or drgrpo", name)
		}
	}
	return ests, nil
}

// gridEval builds the held-out eval set a grid scores against, saying so first: it takes a while.
func (o *simulateOptions) gridEval(ctx context.Context) (*task.EvalSet, error) {
	fmt.Fprintf(o.a.stdout, "eval set: %d held-out problems × %d solutions ...\n", o.evalProblems, len(task.EffectiveSolutions()))
	return sim.Eval(ctx, o.evalProblems, o.workers)
}

// writeGridTables writes a grid's name.csv and name.md into out, made if missing.
func writeGridTables(out, name string, csv, md func(*os.File) error) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := writeFile(filepath.Join(out, name+".csv"), csv); err != nil {
		return err
	}
	return writeFile(filepath.Join(out, name+".md"), md)
}
