package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/dashboard"
	"github.com/wmrl/wmrl/demo"
	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/task"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

func init() { register(newDemoCmd) }

// demoOptions holds demo's flags; its run method is the command's body.
type demoOptions struct {
	a               *app
	cfg             demo.Config
	quick, external bool
	out, dashAddr   string
	linger          time.Duration
}

func newDemoCmd(a *app) *cobra.Command {
	o := &demoOptions{a: a, cfg: demo.Config{Sim: sim.DefaultConfig(), AnchorFraction: 0.25, Seed: 1, EvalProblems: 4, TargetFraction: sim.DefaultTargetFraction}}
	cmd := &cobra.Command{
		Use: "demo",
		Example: `  wmrl demo --quick
  wmrl demo --quick --dashboard 127.0.0.1:8080 --dashboard-linger 10m
  wmrl demo --brokers 127.0.0.1:9092 --redis redis://127.0.0.1:6379/0 --seed 2`,
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
		RunE: o.run,
	}
	f := cmd.Flags()
	f.BoolVar(&o.quick, "quick", false, "short run: 30 steps, 2 held-out problems (explicit --steps/--eval-problems win)")
	f.BoolVar(&o.external, "external", false, "use the global --brokers/--redis (and TLS/SASL options) instead of the embedded ones; implied when either is set")
	f.StringVar(&o.out, "out", "wmrl-demo-report", "report folder (empty: no report)")
	f.StringVar(&o.dashAddr, "dashboard", "", "serve the live dashboard on this address (host:port) during the run, e.g. 127.0.0.1:8080")
	f.DurationVar(&o.linger, "dashboard-linger", 0, "keep the dashboard up this long after the run (0: until Ctrl-C)")
	f.IntVar(&o.cfg.Sim.Steps, "steps", o.cfg.Sim.Steps, "training steps")
	f.IntVar(&o.cfg.Sim.Groups, "groups", o.cfg.Sim.Groups, "groups per step")
	f.IntVar(&o.cfg.Sim.GroupSize, "group-size", o.cfg.Sim.GroupSize, "rollouts per group (G)")
	f.Float64Var(&o.cfg.Sim.LR, "lr", o.cfg.Sim.LR, "policy learning rate")
	f.Float64Var(&o.cfg.AnchorFraction, "anchor-fraction", o.cfg.AnchorFraction, "fraction of groups executed in the wmrl arm")
	f.Int64Var(&o.cfg.Seed, "seed", o.cfg.Seed, "seed (problems, sampling, world-model draws)")
	f.IntVar(&o.cfg.EvalProblems, "eval-problems", o.cfg.EvalProblems, "held-out problems of the exact expected score")
	f.Float64Var(&o.cfg.TargetFraction, "target-fraction", o.cfg.TargetFraction, "target = this × real-GRPO's final score")
	f.DurationVar(&o.cfg.Sim.ExecOverhead, "exec-overhead", 0, "simulated sandbox start-up per execution (waited out in the slot)")
	f.IntVar(&o.cfg.SandboxSlots, "sandbox-slots", 2, "exclusive sandbox slots per arm")
	f.Int32Var(&o.cfg.Partitions, "partitions", 1, "partitions of each arm's topics")
	f.DurationVar(&o.cfg.StallTimeout, "stall-timeout", 2*time.Minute, "fail when an arm seals no step for this long")
	wmFlags(f, &o.cfg.Sim.WorldModel)
	return cmd
}

func (o *demoOptions) run(cmd *cobra.Command, _ []string) error {
	a, cfg := o.a, o.cfg
	ctx, cancel := signalContext()
	defer cancel()
	if o.quick {
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
	// Naming a cluster (flag, WMRL_* env or config file) means using it.
	external := o.external || cmd.Flags().Changed("brokers") || cmd.Flags().Changed("redis")
	where := "embedded Kafka (kfake) + Redis (miniredis)"
	if external {
		w, closeRedis, err := o.useExternal(&cfg)
		if err != nil {
			return err
		}
		defer closeRedis()
		where = w
	}
	cfg.Arms = demo.Arms(cfg.AnchorFraction)
	fmt.Fprintf(a.stdout, "wmrl demo: %s\n", where)
	closeReg, err := o.useFormat(&cfg)
	if err != nil {
		return err
	}
	defer closeReg()
	var dash *dashboard.Server
	if o.dashAddr != "" {
		d, closeDash, err := o.startDashboard(ctx, &cfg, external)
		if err != nil {
			return err
		}
		defer closeDash()
		dash = d
	}
	fmt.Fprintf(a.stdout, "arms: real-grpo (all groups executed), pure-wm (none), wmrl (%.0f%% anchors, OD+IVD); %d steps × %d groups × G=%d, seed %d\n",
		100*cfg.AnchorFraction, cfg.Sim.Steps, cfg.Sim.Groups, cfg.Sim.GroupSize, cfg.Seed)
	fmt.Fprintf(a.stdout, "building the exact evaluator: %d held-out problems × %d solutions ...\n", cfg.EvalProblems, len(task.EffectiveSolutions()))
	prog := newProgress(a.stdout, isTerminal(a.stdout), cfg.Arms, cfg.Sim.Steps)
	cfg.OnStep = prog.step
	start := time.Now()
	res, err := demo.Run(ctx, cfg)
	prog.finish()
	if err != nil && ctx.Err() != nil {
		// A requested stop (SIGINT/SIGTERM) mid-run: nothing to report, nothing failed.
		fmt.Fprintln(a.stdout, "demo stopped by signal before the run finished")
		return nil
	}
	if err != nil {
		return err
	}
	if err := o.printOutcome(where, cfg, res, time.Since(start)); err != nil {
		return err
	}
	if dash != nil {
		dash.SetHeadline(res.Headline())
	}
	demoHandoff(a.stdout, cfg.Seed, cfg.TopicPrefix, a.conn.Brokers, !external)
	if dash != nil {
		return lingerDashboard(ctx, a, dash, o.linger)
	}
	return nil
}

// useExternal points cfg at the global --brokers/--redis, under a fresh topic prefix and Redis
// prefix: a rerun must not meet the sealed state of an earlier one. It returns where the demo
// runs, for the output, and a function that closes the Redis client.
func (o *demoOptions) useExternal(cfg *demo.Config) (where string, closeRedis func(), err error) {
	a := o.a
	kopts, err := a.kafkaOpts()
	if err != nil {
		return "", nil, err
	}
	rdb, err := a.redis()
	if err != nil {
		return "", nil, err
	}
	cfg.KafkaOpts, cfg.Redis = kopts, rdb
	id := strconv.FormatInt(time.Now().Unix(), 10)
	cfg.TopicPrefix += id + "."
	cfg.RedisPrefix = "wmrl-demo-" + id
	where = fmt.Sprintf("Kafka %s, Redis %s (topics %s<arm>.*)", strings.Join(a.conn.Brokers, ","), conn.RedactURL(a.conn.RedisURL), cfg.TopicPrefix)
	return where, func() { rdb.Close() }, nil
}

// startDashboard serves the live dashboard on --dashboard. It reads the same topics and Redis
// as the arms; without an external cluster, an embedded Kafka and Redis are started here so
// that they outlive the run while the page is open. The returned function closes the
// dashboard, then the embedded cluster.
func (o *demoOptions) startDashboard(ctx context.Context, cfg *demo.Config, external bool) (*dashboard.Server, func(), error) {
	closeEmb := func() {}
	if !external {
		emb, err := demo.StartEmbedded()
		if err != nil {
			return nil, nil, err
		}
		closeEmb = emb.Close
		cfg.Embedded = emb
		cfg.KafkaOpts, cfg.Redis = emb.KafkaOpts, emb.Redis
	}
	dash, err := dashboard.Start(ctx, o.dashAddr, dashboard.Config{KafkaOpts: cfg.KafkaOpts, Redis: cfg.Redis,
		TopicPrefix: cfg.TopicPrefix, RedisPrefix: cfg.RedisPrefixOf, Logger: cfg.Logger})
	if err != nil {
		closeEmb()
		return nil, nil, err
	}
	fmt.Fprintf(o.a.stdout, "dashboard: %s\n", dash.URL())
	return dash, func() { dash.Close(); closeEmb() }, nil
}

// printOutcome prints the finished demo's times and summary table, writes its report when
// --out is set, and prints the final line.
func (o *demoOptions) printOutcome(where string, cfg demo.Config, res *demo.Outcome, total time.Duration) error {
	a := o.a
	fmt.Fprintf(a.stdout, "\nevaluator %s, pipeline %s, total %s\n\n", res.Eval.Round(time.Millisecond),
		res.Elapsed.Round(time.Millisecond), total.Round(time.Millisecond))
	fmt.Fprintf(a.stdout, "target: %.0f%% of real-GRPO's final score; compute = real executions (one seed, so no CIs)\n", 100*cfg.TargetFraction)
	if err := sim.WriteTable(a.stdout, res.Summary, cfg.TargetFraction); err != nil {
		return err
	}
	if o.out != "" {
		if err := o.writeReport(where, cfg, res); err != nil {
			return err
		}
	}
	fmt.Fprintln(a.stdout, res.FinalLine)
	return nil
}

// useFormat puts --format on the demo and, for Protobuf, a schema registry: the configured
// --schema-registry, else an in-process one (schemareg.NewDouble, closed by the returned
// function), so a demo run shows the Confluent framing without a registry to run. JSON, the
// default, uses none and prints nothing.
func (o *demoOptions) useFormat(cfg *demo.Config) (func(), error) {
	a := o.a
	cfg.Format = a.conn.Format
	if cfg.Format != topics.FormatProtobuf {
		return func() {}, nil
	}
	reg, err := a.conn.SchemaRegistry()
	if err != nil {
		return nil, err
	}
	closeReg, which := func() {}, strings.Join(a.conn.Registry.URLs, ",")
	if reg == nil {
		fake := schemareg.NewDouble()
		if reg, err = schemareg.New(schemareg.Config{URLs: []string{fake.URL()}}); err != nil {
			fake.Close()
			return nil, err
		}
		closeReg, which = fake.Close, "in-process registry (srfake) "+fake.URL()
	}
	cfg.Registry = reg
	fmt.Fprintf(a.stdout, "format: protobuf, Confluent-framed (schema registry: %s)\n", which)
	return closeReg, nil
}

// writeReport writes the finished demo's HTML report into o.out and says where it is.
func (o *demoOptions) writeReport(where string, cfg demo.Config, res *demo.Outcome) error {
	settings := append([][2]string{{"backend", where},
		{"arms", "real-grpo (every group executed), pure-wm (none), wmrl (anchors, OD + IVD)"},
		{"anchor fraction (wmrl)", fmt.Sprint(cfg.AnchorFraction)}, {"seed", fmt.Sprint(cfg.Seed)},
		{"held-out problems", fmt.Sprint(cfg.EvalProblems)}, {"sandbox slots per arm", fmt.Sprint(cfg.SandboxSlots)},
		{"target", fmt.Sprintf("%.0f%% of real-GRPO's final score", 100*cfg.TargetFraction)}},
		demo.SimSettings(cfg.Sim)...)
	settings = append(settings, [2]string{"pipeline time", res.Elapsed.Round(time.Millisecond).String()})
	files, err := demo.WriteReport(o.out, demo.Report{Title: "wmrl demo", Settings: settings, Results: res.Results,
		TargetFraction: cfg.TargetFraction, FinalLine: res.FinalLine})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.a.stdout, "report: %s (%d files)\n", filepath.Join(o.out, demo.FileHTML), len(files))
	return nil
}

// lingerDashboard keeps the dashboard of a finished demo up (its embedded Kafka and Redis too)
// for d, or until interrupted when d is 0.
func lingerDashboard(ctx context.Context, a *app, dash *dashboard.Server, d time.Duration) error {
	if d > 0 {
		fmt.Fprintf(a.stdout, "dashboard stays up for %s at %s (Ctrl-C stops)\n", d, dash.URL())
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	} else {
		fmt.Fprintf(a.stdout, "dashboard stays up at %s until Ctrl-C (--dashboard-linger bounds it)\n", dash.URL())
		<-ctx.Done()
	}
	return dash.Close()
}
