package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// SandboxConfig configures Benchmark.
type SandboxConfig struct {
	// Slots is the pool size S (default 8).
	Slots int
	// JobTime is the fixed duration of every execution (default 20 ms).
	JobTime time.Duration
	// StageLoad: Records counts anchor rollouts executed.
	StageLoad
}

// SandboxReport is what Benchmark measured, from the first job starting to the last executed
// record read back from the output topic.
type SandboxReport struct {
	Slots, StageConcurrency, Records int
	JobTime, Wall                    time.Duration
	// Utilization is the summed job time over S × Wall (target ≥ 0.95).
	Utilization float64
	// JobsPerSec against IdealPerSec = S / JobTime.
	JobsPerSec, IdealPerSec float64
	// MeanJob is the measured mean job duration (sleep overshoot on a loaded machine).
	MeanJob time.Duration
}

func (r SandboxReport) String() string {
	return fmt.Sprintf("sandbox S=%d handlers=%d job=%v records=%d: utilization=%.3f, %.0f jobs/s vs ideal %.0f, mean job %.2fms, wall %v",
		r.Slots, r.StageConcurrency, r.JobTime, r.Records, r.Utilization, r.JobsPerSec, r.IdealPerSec,
		float64(r.MeanJob.Microseconds())/1000, r.Wall.Round(time.Millisecond))
}

// Benchmark runs the sandbox stage — stage runtime, Handler, Pool — on an in-process Kafka
// (kfake) with fixed-duration builtin jobs and reports slot utilization.
func Sandbox(ctx context.Context, cfg SandboxConfig) (SandboxReport, error) {
	if cfg.Slots <= 0 {
		cfg.Slots = 8
	}
	if cfg.JobTime <= 0 {
		cfg.JobTime = 20 * time.Millisecond
	}
	cfg.StageLoad = cfg.withDefaults(cfg.Slots)
	var clock jobClock
	exec, err := sandbox.NewBuiltinExecutor(func(ctx context.Context, _ sandbox.Job) (float64, error) {
		start := clock.start()
		time.Sleep(cfg.JobTime)
		clock.done(start)
		return 1, nil
	}, sandbox.BuiltinConfig{Timeout: time.Minute})
	if err != nil {
		return SandboxReport{}, err
	}
	pool, err := sandbox.NewPool(exec, cfg.Slots, sandbox.WithLogger(cfg.Logger))
	if err != nil {
		return SandboxReport{}, err
	}
	wall, err := cfg.run(ctx, &clock, "bench-sandbox", topics.Names.Executed, topics.Rollout{Anchor: true, Artifact: "print(1)"},
		func(c stage.Config) (stageRunner, error) {
			return sandbox.NewStage(c, sandbox.HandlerConfig{Pool: pool})
		})
	if err != nil {
		return SandboxReport{}, err
	}
	return SandboxReport{
		Slots: cfg.Slots, StageConcurrency: cfg.StageConcurrency, Records: cfg.Records, JobTime: cfg.JobTime, Wall: wall,
		Utilization: float64(clock.busy.Load()) / (float64(cfg.Slots) * float64(wall)),
		JobsPerSec:  float64(cfg.Records) / wall.Seconds(),
		IdealPerSec: float64(cfg.Slots) / cfg.JobTime.Seconds(),
		MeanJob:     time.Duration(clock.busy.Load() / int64(cfg.Records)),
	}, nil
}
