package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/task"
)

// errorGridOptions are the knobs of `wmrl simulate --error-grid` beyond the
// simulate flags it shares (docs/error_grid.md fixes their defaults).
type errorGridOptions struct {
	biases, noises []float64
	armsChanged    bool
}

// Grid defaults, fixed in docs/error_grid.md before the grid was run.
var (
	defaultGridBiases = []float64{0, 0.15, 0.3}
	defaultGridNoises = []float64{0, 0.15, 0.3}
)

const defaultGridSteps = 40

// runErrorGrid sweeps the error model's (B, σ) grid and writes error_grid.csv,
// error_grid.md and the plots into out.
func runErrorGrid(ctx context.Context, a *app, cfg sim.Config, arms []sim.Arm, seeds []int64, o errorGridOptions,
	anchorFraction, targetFraction float64, evalProblems, workers int, out string) error {
	if !o.armsChanged {
		arms = sim.GridArms(anchorFraction)
	}
	g := sim.ErrorGrid{Config: cfg, Biases: o.biases, Noises: o.noises, Arms: arms, Seeds: seeds,
		Workers: workers, TargetFraction: targetFraction}
	for _, b := range o.biases {
		for _, n := range o.noises {
			if err := (sim.ErrorModel{Bias: b, Noise: n}).Validate(); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	fmt.Fprintf(a.stdout, "eval set: %d held-out problems × %d solutions ...\n", evalProblems, len(task.EffectiveSolutions()))
	eval, err := sim.Eval(ctx, evalProblems, workers)
	if err != nil {
		return err
	}
	cells := len(o.biases) * len(o.noises)
	fmt.Fprintf(a.stdout, "eval set ready in %s; error grid %d cells (B %v × σ %v) × %d arms × %d seeds, %d steps × %d groups × G=%d\n",
		time.Since(start).Round(time.Millisecond), cells, o.biases, o.noises, len(arms), len(seeds), cfg.Steps, cfg.Groups, cfg.GroupSize)
	res, err := g.Run(ctx, eval, func(cell int, p sim.Progress) {
		fmt.Fprintf(a.stdout, "[cell %d/%d run %2d/%d] %-9s seed %-3d final %.3f executions %5d (%s)\n",
			cell+1, cells, p.Done, p.Total, p.Result.Arm, p.Result.Seed, p.Result.FinalScore(),
			last(p.Result).Executions, time.Since(start).Round(time.Second))
	})
	if err != nil {
		return err
	}
	if err := sim.GridTable(a.stdout, res); err != nil {
		return err
	}
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := writeFile(filepath.Join(out, "error_grid.csv"), func(f *os.File) error { return sim.WriteErrorGridCSV(f, res) }); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(out, "error_grid.md"), func(f *os.File) error { return sim.GridTable(f, res) }); err != nil {
			return err
		}
		files, err := sim.WriteGridPlots(out, res)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "wrote error_grid.csv, error_grid.md and %d plots to %s\n", len(files), out)
	}
	fmt.Fprintf(a.stdout, "error grid done in %s\n", time.Since(start).Round(time.Second))
	return nil
}
