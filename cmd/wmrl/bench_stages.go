package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/wmrl/wmrl/bench"
)

func init() { benchCommands = append(benchCommands, newBenchWorldModelCmd, newBenchSandboxCmd) }

// benchStageOptions holds a stage benchmark's flags (cfg, target); its run method is the
// command's body: it runs bench with cfg and fails when the report's measure (got) is below
// target.
type benchStageOptions[C any, R fmt.Stringer] struct {
	a       *app
	name    string
	cfg     C
	load    func(*C) *bench.StageLoad
	bench   func(context.Context, C) (R, error)
	measure string
	got     func(R) float64
	target  float64
}

func (o *benchStageOptions[C, R]) run(_ *cobra.Command, _ []string) error {
	ctx, cancel := signalContext()
	defer cancel()
	cfg := o.cfg
	o.load(&cfg).Logger = o.a.log.With("bench", o.name)
	rep, err := o.bench(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.a.stdout, rep)
	return belowTarget(o.measure, o.got(rep), o.target)
}

func newBenchWorldModelCmd(a *app) *cobra.Command {
	o := &benchStageOptions[bench.WorldModelConfig, bench.WorldModelReport]{a: a, name: "worldmodel", bench: bench.WorldModel,
		load:    func(c *bench.WorldModelConfig) *bench.StageLoad { return &c.StageLoad },
		measure: "busy fraction", got: func(r bench.WorldModelReport) float64 { return r.BusyFraction }}
	cmd := &cobra.Command{
		Use:     "worldmodel",
		Example: `  wmrl bench worldmodel --records 2000 --concurrency 32 --latency 50ms`,
		Short:   "World-model consumer on in-process Kafka against a fixed-latency OpenAI-compatible mock",
		Long: `Runs the real world-model consumer path (stage runtime, handler, OpenAI client) on kfake against a
mock server with fixed latency, and reports the busy fraction (server-observed requests in flight
over C), the scoring-slot fraction and records/s against the ideal C/latency. Exits 1 when the busy
fraction is below --target.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.Concurrency, "concurrency", 32, "C, scoring requests in flight")
	f.DurationVar(&o.cfg.Latency, "latency", 20*time.Millisecond, "mock server latency")
	f.IntVar(&o.cfg.Records, "records", 0, "rollouts to score (default 50×C)")
	f.IntVar(&o.cfg.StageConcurrency, "handlers", 0, "stage handlers (default 2×C; C shows the cost of holding a slot through the produce)")
	f.Float64Var(&o.target, "target", 0.95, "minimum busy fraction")
	return cmd
}

func newBenchSandboxCmd(a *app) *cobra.Command {
	o := &benchStageOptions[bench.SandboxConfig, bench.SandboxReport]{a: a, name: "sandbox", bench: bench.Sandbox,
		load:    func(c *bench.SandboxConfig) *bench.StageLoad { return &c.StageLoad },
		measure: "slot utilization", got: func(r bench.SandboxReport) float64 { return r.Utilization }}
	cmd := &cobra.Command{
		Use:     "sandbox",
		Example: `  wmrl bench sandbox --records 500 --slots 4 --job-time 20ms`,
		Short:   "Sandbox consumer on in-process Kafka with fixed-duration jobs: slot utilization",
		Long: `Runs the real sandbox consumer path (stage runtime, handler, pool) on kfake with builtin jobs of a
fixed duration and reports slot utilization (job time over slots × wall) and jobs/s against the
ideal slots/job-time. Exits 1 when utilization is below --target.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.Slots, "slots", 8, "exclusive slots")
	f.DurationVar(&o.cfg.JobTime, "job-time", 20*time.Millisecond, "duration of every job")
	f.IntVar(&o.cfg.Records, "records", 0, "anchor rollouts to execute (default 50×slots)")
	f.IntVar(&o.cfg.StageConcurrency, "handlers", 0, "stage handlers (default 2×slots)")
	f.Float64Var(&o.target, "target", 0.95, "minimum slot utilization")
	return cmd
}
