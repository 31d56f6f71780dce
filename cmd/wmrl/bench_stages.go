package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/wmrl/wmrl/bench"
)

func init() { benchCommands = append(benchCommands, newBenchWorldModelCmd, newBenchSandboxCmd) }

// benchWorldModelOptions holds bench worldmodel's flags; its run method is the command's body.
type benchWorldModelOptions struct {
	a      *app
	cfg    bench.WorldModelConfig
	target float64
}

func newBenchWorldModelCmd(a *app) *cobra.Command {
	o := &benchWorldModelOptions{a: a}
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

func (o *benchWorldModelOptions) run(_ *cobra.Command, _ []string) error {
	ctx, cancel := signalContext()
	defer cancel()
	cfg := o.cfg
	cfg.Logger = o.a.log.With("bench", "worldmodel")
	rep, err := bench.WorldModel(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.a.stdout, rep)
	return belowTarget("busy fraction", rep.BusyFraction, o.target)
}

// benchSandboxOptions holds bench sandbox's flags; its run method is the command's body.
type benchSandboxOptions struct {
	a      *app
	cfg    bench.SandboxConfig
	target float64
}

func newBenchSandboxCmd(a *app) *cobra.Command {
	o := &benchSandboxOptions{a: a}
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

func (o *benchSandboxOptions) run(_ *cobra.Command, _ []string) error {
	ctx, cancel := signalContext()
	defer cancel()
	cfg := o.cfg
	cfg.Logger = o.a.log.With("bench", "sandbox")
	rep, err := bench.Sandbox(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.a.stdout, rep)
	return belowTarget("slot utilization", rep.Utilization, o.target)
}
