package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/demo"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/task"
)

func init() { register(newSimulateCmd) }

// wmFlags binds the world model's fidelity knobs so simulate and demo expose the same names.
func wmFlags(f *pflag.FlagSet, c *task.WorldModelConfig) {
	f.IntVar(&c.Subsample, "wm-subsample", c.Subsample, "world model: training rows the proxy fits on")
	f.IntVar(&c.Probe, "wm-probe", c.Probe, "world model: rows the proxy scores its fit on")
	f.Float64Var(&c.IterFraction, "wm-iter-fraction", c.IterFraction, "world model: fraction of iterations/boosting rounds run")
	f.Float64Var(&c.CapacityFraction, "wm-capacity-fraction", c.CapacityFraction, "world model: fraction of network width / Fourier features")
	f.Float64Var(&c.Optimism, "wm-optimism", c.Optimism, "world model: weight of the in-sample score in [0,1]")
	f.Float64Var(&c.Floor, "wm-floor", c.Floor, "world model: read-out floor")
	f.Float64Var(&c.Ceil, "wm-ceil", c.Ceil, "world model: read-out ceiling")
	f.Float64Var(&c.Gamma, "wm-gamma", c.Gamma, "world model: read-out exponent")
}

// simulateOptions holds simulate's flags; its run method is the command's body.
type simulateOptions struct {
	a              *app
	cfg            sim.Config
	arms           []string
	seeds          int
	firstSeed      int64
	anchorFraction float64
	evalProblems   int
	targetFraction float64
	workers        int
	out            string
	errorGrid      bool
	quick          bool
	mapName        string
	policyNames    []string
	policies       []sim.AnchorPolicy
	gateNames      []string
	gates          []bool
	grid           errorGridOptions
}

func newSimulateCmd(a *app) *cobra.Command {
	o := &simulateOptions{a: a, cfg: sim.DefaultConfig(), grid: errorGridOptions{biases: defaultGridBiases, noises: defaultGridNoises}}
	cmd := &cobra.Command{
		Use: "simulate",
		Example: `  wmrl simulate --quick
  wmrl simulate --seeds 10 --arms real-grpo,pure-wm,wmrl --out sweep
  wmrl simulate --error-grid --seeds 3
  wmrl simulate --error-grid --grid-family calibration --seeds 5`,
		Short: "Sweep arms × seeds of the WMRL task loop in one process (no Kafka)",
		Long: `simulate trains the built-in task's policy with the same correction core the pipeline uses,
but without Kafka, for sweeps. Arms: real-grpo (every group executed), pure-wm (no anchors, no
correction), none (anchors, no OD/IVD), ivd, od, wmrl (OD+IVD, default mode), reference (the
authors' code), wmrl-cir (OD+IVD with the centred isotonic map), and od-<map> / wmrl-<map> for the
maps centred and zspace (--map sets the map of every debiasing arm at once). --anchor-policy runs the
anchored arms under other anchor choices (routed, mixed and their -noipw controls; docs/anchors.md)
as <arm>-<policy>. --trust-gate on runs them with the trust gate (docs/anchors.md: a step's
world-model rows are masked while the window's anchors show the world model uninformative) as
<arm>-gate; --trust-gate off,on runs both. Every arm of a seed shares training problems, sampler seed and, under the random
policy, anchor groups (other policies share the per-group uniform draw). steps.csv's debias_shift is the mean
|A(f(r̂)) − A(r̂)|: how far the map moved the world-model rows' advantages in that step.

Compute is counted primarily as the number of real executions (deterministic, load-independent);
measured execution wall time and the simulated --exec-overhead are reported beside it. The score is
the policy's exact expected true score on held-out problems. The target of a seed is
--target-fraction × real-GRPO's final score in that seed. Output: a table of mean ± 95% CI
(Student t) over seeds, and in --out the same report as wmrl demo (report.html, plots with CI
bands over seeds, steps.csv, summary.csv).

--error-grid replaces the proxy world model by the paper's error model r̂ = r + b(τ) + ξ and
sweeps its (bias, noise) grid instead (docs/error_grid.md).

When anchor policies other than random run beside random, or --trust-gate off,on, simulate also prints
and writes (paired.csv, paired.md) each policy arm paired by seed with the same arm under random anchors,
and each gated arm with the same arm without the gate, with the verdict of docs/anchors.md's
pre-registered rules; the error grid does so per cell.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringSliceVar(&o.arms, "arms", sim.ArmNames(), "arms to run (real-grpo is always added: targets are relative to it)")
	f.StringVar(&o.mapName, "map", "isotonic", "calibration map of the arms that debias in default mode: isotonic, centred or zspace (those arms are renamed <arm>-<map>, e.g. wmrl-zspace; --no-debias arms such as none and ivd are unchanged)")
	f.StringSliceVar(&o.policyNames, "anchor-policy", []string{"random"}, "anchor policies, comma-separated: "+strings.Join(sim.AnchorPolicyNames(), ", ")+
		" (docs/anchors.md); random keeps the arms as they are, every other policy runs the anchored default-mode arms as <arm>-<policy>, e.g. wmrl-routed")
	f.StringSliceVar(&o.gateNames, "trust-gate", []string{"off"}, "trust gate settings, comma-separated: off, on; "+
		"on masks a step's world-model rows while the window's anchor pairs correlate with the world model below 1/√(n−2) "+
		"(docs/anchors.md), and runs the anchored default-mode arms as <arm>-gate, e.g. wmrl-gate; off,on runs both in one sweep on the same seeds and anchors")
	f.IntVar(&o.seeds, "seeds", 5, "number of seeds")
	f.Int64Var(&o.firstSeed, "seed", 1, "first seed (seeds are seed, seed+1, ...)")
	f.IntVar(&cfg.Steps, "steps", cfg.Steps, "training steps")
	f.IntVar(&cfg.Groups, "groups", cfg.Groups, "groups per step")
	f.IntVar(&cfg.GroupSize, "group-size", cfg.GroupSize, "rollouts per group (G)")
	f.Float64Var(&cfg.LR, "lr", cfg.LR, "policy learning rate")
	f.Float64Var(&o.anchorFraction, "anchor-fraction", 0.25, "fraction of groups executed in the anchored arms")
	f.DurationVar(&cfg.ExecOverhead, "exec-overhead", 0, "simulated sandbox start-up per execution (accounted, not slept)")
	f.IntVar(&o.evalProblems, "eval-problems", 4, "held-out problems of the exact expected score (≈756 executions each, once)")
	f.Float64Var(&o.targetFraction, "target-fraction", sim.DefaultTargetFraction, "target = this × real-GRPO's final score of the same seed")
	f.IntVar(&o.workers, "workers", 0, "concurrent runs (0 = GOMAXPROCS)")
	f.StringVar(&o.out, "out", "simulate-out", "report folder: report.html, plots, steps.csv, summary.csv (empty: none)")
	f.BoolVar(&o.errorGrid, "error-grid", false, "sweep the error model r̂ = r + B·b(τ) + σ·ξ over --grid-bias × --grid-noise (docs/error_grid.md); "+
		"arms default to real-grpo, pure-wm, none, od, ivd, wmrl, wmrl-cir and steps to 40; writes error_grid.csv, error_grid.md and plots to --out")
	f.Float64SliceVar(&o.grid.biases, "grid-bias", defaultGridBiases, "error grid: bias strengths B")
	f.Float64SliceVar(&o.grid.noises, "grid-noise", defaultGridNoises, "error grid: noise levels σ")
	gridFlags(f, &o.grid)
	f.BoolVar(&o.quick, "quick", false, "short sweep: 2 seeds, 30 steps, 2 held-out problems (explicit --seeds/--steps/--eval-problems win)")
	wmFlags(f, &cfg.WorldModel)
	return cmd
}

func (o *simulateOptions) run(cmd *cobra.Command, _ []string) error {
	ctx, cancel := signalContext()
	defer cancel()
	if o.quick {
		for name, set := range map[string]func(){
			"seeds": func() { o.seeds = 2 }, "steps": func() { o.cfg.Steps = 30 }, "eval-problems": func() { o.evalProblems = 2 },
		} {
			if !cmd.Flags().Changed(name) {
				set()
			}
		}
	}
	err := o.sweep(ctx, cmd)
	if err != nil && ctx.Err() != nil {
		// A requested stop (SIGINT/SIGTERM): no report, and no failure either.
		fmt.Fprintln(o.a.stdout, "simulate stopped by signal")
		return nil
	}
	return err
}

func (o *simulateOptions) sweep(ctx context.Context, cmd *cobra.Command) error {
	a, cfg := o.a, o.cfg
	as, err := o.sweepArms()
	if err != nil {
		return err
	}
	if o.seeds < 1 {
		return fmt.Errorf("--seeds %d: want >= 1", o.seeds)
	}
	sw := sim.Sweep{Config: cfg, Arms: as, Workers: o.workers}
	for i := range o.seeds {
		sw.Seeds = append(sw.Seeds, o.firstSeed+int64(i))
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if o.errorGrid {
		if !cmd.Flags().Changed("steps") {
			cfg.Steps = defaultGridSteps
		}
		o.grid.armsChanged = cmd.Flags().Changed("arms")
		o.grid.estimatorsChanged = cmd.Flags().Changed("grid-estimators")
		return o.runErrorGrid(ctx, cfg, as, sw.Seeds)
	}
	start := time.Now()
	fmt.Fprintf(a.stdout, "eval set: %d held-out problems × %d solutions ...\n", o.evalProblems, len(task.EffectiveSolutions()))
	// The eval set and the first runs take a minute or more without a result to print; a line
	// every progressEvery says the sweep is alive and where it is.
	var phase atomic.Value
	phase.Store("building the eval set")
	stopTicker := tickProgress(a.stdout, start, &phase)
	defer stopTicker()
	eval, err := sim.Eval(ctx, o.evalProblems, o.workers)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "eval set ready in %s; %d runs (%d arms × seeds %d..%d), %d steps × %d groups × G=%d, lr %g, anchor fraction %g\n",
		time.Since(start).Round(time.Millisecond), len(as)*o.seeds, len(as), sw.Seeds[0], sw.Seeds[len(sw.Seeds)-1],
		cfg.Steps, cfg.Groups, cfg.GroupSize, cfg.LR, o.anchorFraction)
	phase.Store(fmt.Sprintf("running %d runs, none finished yet", len(as)*o.seeds))
	results, err := sw.Run(ctx, eval, func(p sim.Progress) {
		phase.Store(fmt.Sprintf("%d of %d runs finished", p.Done, p.Total))
		fmt.Fprintf(a.stdout, "[%3d/%d] %-10s seed %-3d final %.3f executions %6d exec %7.2fs wm %6.2fs (%s)\n",
			p.Done, p.Total, p.Result.Arm, p.Result.Seed, p.Result.FinalScore(),
			last(p.Result).Executions, last(p.Result).ExecCompute.Seconds(), last(p.Result).WMCompute.Seconds(),
			time.Since(start).Round(time.Second))
	})
	if err != nil {
		return err
	}
	sums := sim.Summarize(results, o.targetFraction)
	fmt.Fprintf(a.stdout, "\ntarget per seed: %.0f%% of real-GRPO's final score; CIs are 95%% (t, n = seeds reaching the target)\n", 100*o.targetFraction)
	if err := sim.WriteTable(a.stdout, sums, o.targetFraction); err != nil {
		return err
	}
	if o.out != "" {
		if err := o.writeReport(cfg, as, sw.Seeds, results); err != nil {
			return err
		}
	}
	if pairings := append(sim.PolicyPairings(as), sim.GatePairings(as)...); len(pairings) > 0 {
		cs, err := sim.Paired(results, pairings, o.targetFraction, cfg.Groups)
		if err != nil {
			return err
		}
		if err := writePaired(a.stdout, o.out, nil, []sim.PairedBlock{{Comparisons: cs}},
			func(sim.PairedBlock) string { return "" }, o.targetFraction); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stdout, "done in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// sweepArms is --arms under --map, with the arms --anchor-policy and --trust-gate add.
func (o *simulateOptions) sweepArms() ([]sim.Arm, error) {
	as, err := sim.ArmsByName(o.arms, o.anchorFraction)
	if err != nil {
		return nil, err
	}
	if o.grid.mapKind, err = correction.ParseMapKind(strings.ToLower(o.mapName)); err != nil {
		return nil, fmt.Errorf("--map: %w", err)
	}
	as = sim.WithMap(as, o.grid.mapKind)
	o.policies = o.policies[:0]
	for _, n := range o.policyNames {
		p, err := sim.ParseAnchorPolicy(n)
		if err != nil {
			return nil, fmt.Errorf("--anchor-policy: %w", err)
		}
		o.policies = append(o.policies, p)
	}
	as = sim.WithPolicies(as, o.policies)
	if o.gates, err = parseTrustGates(o.gateNames); err != nil {
		return nil, err
	}
	return sim.WithTrustGate(as, o.gates), nil
}

// writeReport writes the sweep's HTML report, plots and CSVs into --out and says where.
func (o *simulateOptions) writeReport(cfg sim.Config, as []sim.Arm, seeds []int64, results []sim.Result) error {
	var names []string
	for _, arm := range as {
		names = append(names, arm.Name)
	}
	settings := append([][2]string{{"arms", strings.Join(names, ", ")},
		{"seeds", fmt.Sprintf("%d (%d..%d)", o.seeds, seeds[0], seeds[len(seeds)-1])},
		{"anchor fraction (anchored arms)", fmt.Sprint(o.anchorFraction)}, {"held-out problems", fmt.Sprint(o.evalProblems)},
		{"trust gate", strings.Join(o.gateNames, ", ")},
		{"target", fmt.Sprintf("%.0f%% of real-GRPO's final score in the same seed", 100*o.targetFraction)}},
		demo.SimSettings(cfg)...)
	files, err := demo.WriteReport(o.out, demo.Report{Title: "wmrl simulate", Settings: settings, Results: results,
		TargetFraction: o.targetFraction})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.a.stdout, "report: %s (%d files: plots, steps.csv, summary.csv)\n", filepath.Join(o.out, demo.FileHTML), len(files))
	return nil
}

// parseTrustGates parses --trust-gate: off and on, each at most once, in the order given.
func parseTrustGates(names []string) ([]bool, error) {
	var out []bool
	seen := map[bool]bool{}
	for _, n := range names {
		var on bool
		switch strings.ToLower(strings.TrimSpace(n)) {
		case "off":
		case "on":
			on = true
		default:
			return nil, fmt.Errorf("--trust-gate %q: want off, on or off,on", n)
		}
		if !seen[on] {
			seen[on] = true
			out = append(out, on)
		}
	}
	return out, nil
}

// progressEvery is how often a long simulate phase prints that it is still at work.
const progressEvery = 15 * time.Second

// tickProgress prints "… <phase> (<elapsed>)" every progressEvery until stopped.
func tickProgress(w io.Writer, start time.Time, phase *atomic.Value) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "… %s (%s)\n", phase.Load(), time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func last(r sim.Result) sim.StepRecord {
	if len(r.Steps) == 0 {
		return sim.StepRecord{}
	}
	return r.Steps[len(r.Steps)-1]
}

// writeFile creates path, lets fill write it and reports the first error, including Close's.
func writeFile(path string, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
