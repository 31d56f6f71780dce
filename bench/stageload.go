package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// StageLoad is what the sandbox and world-model benchmarks share besides their slot count and
// job time: both run slots concurrent jobs of a fixed duration through a real stage on an
// in-process Kafka.
type StageLoad struct {
	// Records is the number of rollouts handled (default 50 per slot).
	Records int
	// StageConcurrency overrides the runtime's handler count (0 = the stage's own 2 per slot).
	// One per slot shows what holding a slot's handler through the produce acknowledgement costs.
	StageConcurrency int
	// Partitions of the in-process topics (default 3).
	Partitions int
	Logger     *slog.Logger
}

// withDefaults fills the zero fields of l for slots concurrent jobs.
func (l StageLoad) withDefaults(slots int) StageLoad {
	if l.Records <= 0 {
		l.Records = 50 * slots
	}
	if l.Partitions <= 0 {
		l.Partitions = 3
	}
	if l.Logger == nil {
		l.Logger = slog.New(slog.DiscardHandler)
	}
	l.StageConcurrency = cmp.Or(l.StageConcurrency, 2*slots)
	return l
}

// run measures a stage on a fresh one-broker in-process Kafka (kfake) holding l.Partitions
// partitions of the rollouts topic, the stage's output topic (output of the names) and the DLQ:
// it writes l.Records rollouts like tmpl, makes the stage with newStage (from the stage.Config
// both benchmarks use, group its consumer group) and runs it until every record is on the output
// topic. It returns the wall time from the first job's start (clock) to the last record's arrival.
func (l StageLoad) run(ctx context.Context, clock *jobClock, group string, output func(topics.Names) string, tmpl topics.Rollout,
	newStage func(stage.Config) (stageRunner, error)) (time.Duration, error) {
	names := topics.NewNames("bench.")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(l.Partitions), names.Rollouts(), output(names), names.DLQ()))
	if err != nil {
		return 0, fmt.Errorf("kfake: %w", err)
	}
	defer cluster.Close()
	seeds := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	if err := produceRollouts(ctx, seeds, names, l.Records, l.Partitions, tmpl); err != nil {
		return 0, err
	}
	st, err := newStage(stage.Config{Names: names, Group: group, KafkaOpts: seeds, Concurrency: l.StageConcurrency, Logger: l.Logger})
	if err != nil {
		return 0, err
	}
	end, err := runStageUntil(ctx, st, seeds, output(names), l.Records)
	if err != nil {
		return 0, err
	}
	return end.Sub(clock.firstAt), nil
}

// jobClock times a benchmark's jobs: when the first started (the start of the measured window)
// and their summed duration.
type jobClock struct {
	busy    atomic.Int64
	first   sync.Once
	firstAt time.Time
}

// start marks a job's start and returns it for done.
func (c *jobClock) start() time.Time {
	now := time.Now()
	c.first.Do(func() { c.firstAt = now })
	return now
}

// done adds the duration of the job started at start.
func (c *jobClock) done(start time.Time) { c.busy.Add(int64(time.Since(start))) }
