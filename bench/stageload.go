package bench

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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
		l.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if l.StageConcurrency == 0 {
		l.StageConcurrency = 2 * slots
	}
	return l
}

// fakeKafka starts a one-broker in-process Kafka (kfake) holding l.Partitions partitions of the
// rollouts topic, the stage's output topic and the DLQ of names; the caller closes it.
func (l StageLoad) fakeKafka(names topics.Names, output string) (*kfake.Cluster, []kgo.Opt, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(l.Partitions), names.Rollouts(), output, names.DLQ()))
	if err != nil {
		return nil, nil, fmt.Errorf("kfake: %w", err)
	}
	return cluster, []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, nil
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
