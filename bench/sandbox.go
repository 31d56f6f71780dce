package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// SandboxConfig configures Benchmark.
type SandboxConfig struct {
	// Slots is the pool size S (default 8).
	Slots int
	// JobTime is the fixed duration of every execution (default 20 ms).
	JobTime time.Duration
	// Records is the number of anchor rollouts executed (default 50·S).
	Records int
	// StageConcurrency overrides the runtime's handler count (0 = sandbox.NewStage's 2·S). S shows what
	// holding a slot's handler through the produce acknowledgement costs.
	StageConcurrency int
	Partitions       int // default 3
	Logger           *slog.Logger
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
	if cfg.Records <= 0 {
		cfg.Records = 50 * cfg.Slots
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.StageConcurrency == 0 {
		cfg.StageConcurrency = 2 * cfg.Slots
	}
	names := topics.NewNames("bench.")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(cfg.Partitions), names.Rollouts(), names.Executed(), names.DLQ()))
	if err != nil {
		return SandboxReport{}, fmt.Errorf("kfake: %w", err)
	}
	defer cluster.Close()
	seeds := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}

	var busy atomic.Int64
	var first sync.Once
	var firstAt time.Time
	exec, err := sandbox.NewBuiltinExecutor(func(ctx context.Context, _ sandbox.Job) (float64, error) {
		start := time.Now()
		first.Do(func() { firstAt = start })
		time.Sleep(cfg.JobTime)
		busy.Add(int64(time.Since(start)))
		return 1, nil
	}, sandbox.BuiltinConfig{Timeout: time.Minute})
	if err != nil {
		return SandboxReport{}, err
	}
	pool, err := sandbox.NewPool(exec, cfg.Slots, sandbox.WithLogger(cfg.Logger))
	if err != nil {
		return SandboxReport{}, err
	}
	if err := produceAnchors(ctx, seeds, names, cfg.Records, cfg.Partitions); err != nil {
		return SandboxReport{}, err
	}
	st, err := sandbox.NewStage(stage.Config{Names: names, Group: "bench-sandbox", KafkaOpts: seeds, Concurrency: cfg.StageConcurrency, Logger: cfg.Logger},
		sandbox.HandlerConfig{Pool: pool})
	if err != nil {
		return SandboxReport{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- st.Run(runCtx) }()
	end, err := awaitRecords(ctx, seeds, names.Executed(), cfg.Records)
	stop()
	if rerr := <-runErr; err == nil {
		err = rerr
	}
	if err != nil {
		return SandboxReport{}, err
	}
	wall := end.Sub(firstAt)
	return SandboxReport{
		Slots: cfg.Slots, StageConcurrency: cfg.StageConcurrency, Records: cfg.Records, JobTime: cfg.JobTime, Wall: wall,
		Utilization: float64(busy.Load()) / (float64(cfg.Slots) * float64(wall)),
		JobsPerSec:  float64(cfg.Records) / wall.Seconds(),
		IdealPerSec: float64(cfg.Slots) / cfg.JobTime.Seconds(),
		MeanJob:     time.Duration(busy.Load() / int64(cfg.Records)),
	}, nil
}

func produceAnchors(ctx context.Context, seeds []kgo.Opt, names topics.Names, n, runs int) error {
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		g := strconv.Itoa(i / 8)
		rec, err := names.RolloutRecord(topics.Rollout{
			RunID: "bench-" + strconv.Itoa(i%runs), GroupID: g, RolloutID: g + "-" + strconv.Itoa(i%8), Stream: "main",
			Anchor: true, Index: i % 8, Artifact: "print(1)", CreatedAt: time.Now(),
		})
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce rollouts: %w", err)
	}
	return nil
}
