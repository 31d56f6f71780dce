package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/demo"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/task"
)

func init() { register(newDemoCmd) }

func newDemoCmd(a *app) *cobra.Command {
	cfg := demo.Config{Sim: sim.DefaultConfig(), AnchorFraction: 0.25, Seed: 1, EvalProblems: 4, TargetFraction: sim.DefaultTargetFraction}
	var (
		quick    bool
		external bool
		out      string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline in one process: real-GRPO vs pure world model vs WMRL",
		Long: `demo runs every stage — generator, world model, sandbox, correction consumer, trainer sink —
for three arms side by side, talking only through Kafka topics and Redis: an embedded Kafka (kfake)
and Redis (miniredis) by default, or a real cluster when --brokers/--redis is given (flag, env or
config file) or --external asks for the defaults.
Each arm has its own topics (<prefix>demo.<arm>.*) and Redis namespace. The policy loop closes
through the topics: the generator samples step v+1 only after the trainer applied step v's
advantages.

Arms: real-grpo (every group executed), pure-wm (no anchors, no correction), wmrl (--anchor-fraction
of groups executed, Online Debiasing + Inverse-Variance Denoising). Execution compute is counted in
real executions; the score is the policy's exact expected true score on held-out problems; the
target is --target-fraction × real-GRPO's final score. The report folder gets report.html, PNG
plots and CSVs. --quick is a shorter run (30 steps, 2 held-out problems).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if quick {
				if !cmd.Flags().Changed("steps") {
					cfg.Sim.Steps = 30
				}
				if !cmd.Flags().Changed("eval-problems") {
					cfg.EvalProblems = 2
				}
			}
			// The stages log every step at info level; in a demo that drowns the progress display,
			// so they get warnings only unless debug logging was asked for.
			cfg.Logger = a.log
			if !a.log.Enabled(ctx, slog.LevelDebug) {
				cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			cfg.TopicPrefix = a.conn.TopicPrefix + "demo."
			where := "embedded Kafka (kfake) + Redis (miniredis)"
			// Naming a cluster (flag, WMRL_* env or config file) means using it.
			if cmd.Flags().Changed("brokers") || cmd.Flags().Changed("redis") {
				external = true
			}
			if external {
				kopts, err := a.conn.KafkaOpts()
				if err != nil {
					return err
				}
				rdb, err := a.redis()
				if err != nil {
					return err
				}
				defer rdb.Close()
				cfg.KafkaOpts, cfg.Redis = kopts, rdb
				// Fresh topics and Redis keys per demo: a rerun must not meet the sealed state of
				// an earlier one.
				id := strconv.FormatInt(time.Now().Unix(), 10)
				cfg.TopicPrefix += id + "."
				cfg.RedisPrefix = "wmrl-demo-" + id
				where = fmt.Sprintf("Kafka %s, Redis %s (topics %s<arm>.*)", strings.Join(a.conn.Brokers, ","), redactURL(a.conn.RedisURL), cfg.TopicPrefix)
			}
			cfg.Arms = demo.Arms(cfg.AnchorFraction)
			fmt.Fprintf(a.stdout, "wmrl demo: %s\n", where)
			fmt.Fprintf(a.stdout, "arms: real-grpo (all groups executed), pure-wm (none), wmrl (%.0f%% anchors, OD+IVD); %d steps × %d groups × G=%d, seed %d\n",
				100*cfg.AnchorFraction, cfg.Sim.Steps, cfg.Sim.Groups, cfg.Sim.GroupSize, cfg.Seed)
			fmt.Fprintf(a.stdout, "building the exact evaluator: %d held-out problems × %d solutions ...\n", cfg.EvalProblems, len(task.EffectiveSolutions()))
			prog := newProgress(a.stdout, cfg.Arms, cfg.Sim.Steps)
			cfg.OnStep = prog.step
			start := time.Now()
			res, err := demo.Run(ctx, cfg)
			prog.finish()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "\nevaluator %s, pipeline %s, total %s\n\n", res.Eval.Round(time.Millisecond),
				res.Elapsed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(a.stdout, "target: %.0f%% of real-GRPO's final score; compute = real executions (one seed, so no CIs)\n", 100*cfg.TargetFraction)
			if err := sim.WriteTable(a.stdout, res.Summary); err != nil {
				return err
			}
			if out != "" {
				settings := [][2]string{
					{"backend", where}, {"steps × groups × G", fmt.Sprintf("%d × %d × %d", cfg.Sim.Steps, cfg.Sim.Groups, cfg.Sim.GroupSize)},
					{"learning rate", fmt.Sprint(cfg.Sim.LR)}, {"anchor fraction (wmrl)", fmt.Sprint(cfg.AnchorFraction)},
					{"seed", fmt.Sprint(cfg.Seed)}, {"held-out problems", fmt.Sprint(cfg.EvalProblems)},
					{"world model", fmt.Sprintf("%+v", cfg.Sim.WorldModel)}, {"sandbox overhead", cfg.Sim.ExecOverhead.String()},
					{"pipeline time", res.Elapsed.Round(time.Millisecond).String()},
				}
				files, err := demo.WriteReport(out, demo.Report{Title: "wmrl demo", Settings: settings, Results: res.Results,
					TargetFraction: cfg.TargetFraction, FinalLine: res.FinalLine})
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "report: %s (%d files)\n", filepath.Join(out, demo.FileHTML), len(files))
			}
			fmt.Fprintln(a.stdout, res.FinalLine)
			demoHandoff(a.stdout, cfg.Seed, cfg.TopicPrefix, a.conn.Brokers, !external)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "short run: 30 steps, 2 held-out problems (explicit --steps/--eval-problems win)")
	f.BoolVar(&external, "external", false, "use the global --brokers/--redis (and TLS/SASL options) instead of the embedded ones; implied when either is set")
	f.StringVar(&out, "out", "wmrl-demo-report", "report folder (empty: no report)")
	f.IntVar(&cfg.Sim.Steps, "steps", cfg.Sim.Steps, "training steps")
	f.IntVar(&cfg.Sim.Groups, "groups", cfg.Sim.Groups, "groups per step")
	f.IntVar(&cfg.Sim.GroupSize, "group-size", cfg.Sim.GroupSize, "rollouts per group (G)")
	f.Float64Var(&cfg.Sim.LR, "lr", cfg.Sim.LR, "policy learning rate")
	f.Float64Var(&cfg.AnchorFraction, "anchor-fraction", cfg.AnchorFraction, "fraction of groups executed in the wmrl arm")
	f.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed (problems, sampling, world-model draws)")
	f.IntVar(&cfg.EvalProblems, "eval-problems", cfg.EvalProblems, "held-out problems of the exact expected score")
	f.Float64Var(&cfg.TargetFraction, "target-fraction", cfg.TargetFraction, "target = this × real-GRPO's final score")
	f.DurationVar(&cfg.Sim.ExecOverhead, "exec-overhead", 0, "simulated sandbox start-up per execution (waited out in the slot)")
	f.IntVar(&cfg.SandboxSlots, "sandbox-slots", 2, "exclusive sandbox slots per arm")
	f.Int32Var(&cfg.Partitions, "partitions", 1, "partitions of each arm's topics")
	f.DurationVar(&cfg.StallTimeout, "stall-timeout", 2*time.Minute, "fail when an arm seals no step for this long")
	wmFlags(f, &cfg.Sim.WorldModel)
	return cmd
}

// redactURL drops a password from a Redis URL before it is printed.
func redactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "***" + u[at:]
}

// progress prints one line per arm and step, or, on a terminal, a table refreshed in place.
type progress struct {
	w      io.Writer
	tty    bool
	arms   []string
	steps  int
	last   map[string]sim.StepRecord
	drawn  bool
	start  time.Time
	lastAt time.Time
}

func newProgress(w io.Writer, arms []sim.Arm, steps int) *progress {
	p := &progress{w: w, steps: steps, last: map[string]sim.StepRecord{}, start: time.Now()}
	for _, a := range arms {
		p.arms = append(p.arms, a.Name)
	}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) line(arm string, r sim.StepRecord) string {
	cal, ivd := "      -", "    -"
	if r.AnchorGroups > 0 {
		cal = fmt.Sprintf("%7.3f", r.CalibrationMAE)
	}
	if arm != sim.ArmRealGRPO && arm != sim.ArmPureWM {
		ivd = fmt.Sprintf("%5.2f", r.AnchorWeight)
	}
	return fmt.Sprintf("%-10s step %3d/%d  score %.3f  executions %5d  exec %6.2fs  cal-err %s  ivd-w %s",
		arm, r.Step+1, p.steps, r.Score, r.Executions, (r.ExecCompute + r.ExecOverhead).Seconds(), cal, ivd)
}

func (p *progress) step(arm string, r sim.StepRecord) {
	p.last[arm] = r
	if !p.tty {
		fmt.Fprintf(p.w, "%s  (%s)\n", p.line(arm, r), time.Since(p.start).Round(100*time.Millisecond))
		return
	}
	if time.Since(p.lastAt) < 100*time.Millisecond && r.Step+1 < p.steps {
		return
	}
	p.lastAt = time.Now()
	p.draw()
}

func (p *progress) draw() {
	if p.drawn {
		fmt.Fprintf(p.w, "\x1b[%dA", len(p.arms)+1)
	}
	p.drawn = true
	fmt.Fprintf(p.w, "\x1b[2K%s elapsed\n", time.Since(p.start).Round(100*time.Millisecond))
	for _, a := range p.arms {
		if r, ok := p.last[a]; ok {
			fmt.Fprintf(p.w, "\x1b[2K%s\n", p.line(a, r))
		} else {
			fmt.Fprintf(p.w, "\x1b[2K%-10s waiting for step 1\n", a)
		}
	}
}

func (p *progress) finish() {
	if p.tty && len(p.last) > 0 {
		p.draw()
	}
}
