package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// CorrectionConfig configures Benchmark.
type CorrectionConfig struct {
	KafkaOpts []kgo.Opt
	Redis     redis.UniversalClient
	// Workload of the throughput phase.
	Workload   workload.Config
	Partitions int32
	// LatencySteps is the number of single steps timed in the latency phase.
	LatencySteps int
	Correction   correction.Config
	ChunkBytes   int
	Logger       *slog.Logger
	// KeepTopics leaves the benchmark's topics and Redis keys in place.
	KeepTopics bool
	// FetchMaxPartitionBytes bounds one fetch per partition (both consumers); default 1 MiB, the
	// Kafka and franz-go consumer default.
	FetchMaxPartitionBytes int32
	// MaxTxnSteps and MaxTxnLinger are passed to the correction consumer (correct.Config).
	MaxTxnSteps  int
	MaxTxnLinger time.Duration
	// Format is the wire format of the benchmark's input records (--format; docs/formats.md).
	Format topics.Format
	// Registry, when set (Format Protobuf), Confluent-frames the input records against it and
	// the correction consumer checks their ids; the benchmark's schemas are registered first.
	Registry *schemareg.Registry
}

// Correction measures, on one broker in one run: records/s through the correction consumer versus
// a pass-through transactional consume→produce of the same input records; Redis round trips per
// sealed step; and the latency from a step's last reward to its advantages being visible to a
// read_committed consumer. It creates (and deletes) its own topics under a fresh prefix.
func Correction(ctx context.Context, cfg CorrectionConfig) (CorrectionReport, error) {
	var rep CorrectionReport
	cfg.setDefaults()
	b, err := prepareRun(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer b.close()
	rep.Records = b.records

	// Phase 1: pass-through.
	cpu0 := cpuTime()
	pprof.Do(ctx, pprof.Labels("phase", "passthrough"), func(ctx context.Context) {
		rep.PassThroughElapsed, err = passThrough(ctx, b.consumeOpts, b.names, b.prefix+"passthrough", b.prefix+"pass", b.records)
	})
	if err != nil {
		return rep, fmt.Errorf("pass-through: %w", err)
	}
	rep.PassThroughCPU = cpuTime() - cpu0
	rep.PassThroughPerSec = float64(b.records) / rep.PassThroughElapsed.Seconds()

	// Phase 2: the correction consumer over the same records, then the latency phase.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr, err := rep.correctionPhase(cctx, cfg, b)
	if err != nil {
		return rep, err
	}
	if rep.TopicBytes, err = topicLogBytes(ctx, b.adm, b.names, cfg.Partitions); err != nil {
		return rep, err
	}
	if cfg.LatencySteps > 0 {
		if err := rep.latencyPhase(ctx, &latencyProbe{}, cfg, b.adm, b.names); err != nil {
			return rep, err
		}
	}
	cancel()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		return rep, err
	}
	// After the consumer stopped, so that its buffers do not blur the heap measurement.
	if err := changelogCost(ctx, &rep, b.adm, cfg, b.consumeOpts, b.names); err != nil {
		return rep, err
	}
	return rep, nil
}

// benchRun is one round's topics and input: prepareRun creates them, close deletes them.
type benchRun struct {
	prefix, redisPrefix string
	names               topics.Names
	consumeOpts         []kgo.Opt
	adm                 *kadm.Client
	steps, records      int
	close               func()
}

// prepareRun registers the schemas (with cfg.Registry), creates the round's topics under a fresh
// prefix and writes the synthetic input to them.
func prepareRun(ctx context.Context, cfg CorrectionConfig) (b benchRun, err error) {
	b.prefix = fmt.Sprintf("wmrl-bench-%d.", time.Now().UnixNano())
	b.redisPrefix = strings.TrimSuffix(b.prefix, ".")
	b.consumeOpts = append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.FetchMaxPartitionBytes(cfg.FetchMaxPartitionBytes))
	b.names = topics.NewNames(b.prefix)
	b.names.Format = cfg.Format
	if cfg.Registry != nil {
		ss, err := schemareg.Schemas(b.names)
		if err != nil {
			return b, err
		}
		if _, err := cfg.Registry.Register(ctx, ss...); err != nil {
			return b, fmt.Errorf("bench: %w", err)
		}
		b.names.Registry = cfg.Registry
	}
	admCl, err := kgo.NewClient(cfg.KafkaOpts...)
	if err != nil {
		return b, err
	}
	b.adm = kadm.NewClient(admCl)
	cleanup, err := benchTopics(ctx, b.adm, cfg, b.names, b.prefix+"passthrough", b.redisPrefix)
	if err != nil {
		admCl.Close()
		return b, err
	}
	b.close = func() { cleanup(); admCl.Close() }
	steps, err := workload.Synthesize(b.names, cfg.Workload)
	if err == nil {
		recs := flattenSteps(steps)
		b.steps, b.records = len(steps), len(recs)
		err = produceCopies(ctx, cfg.KafkaOpts, recs)
	}
	if err != nil {
		b.close()
		return b, err
	}
	cfg.Logger.Info("bench: inputs written", "records", b.records, "prefix", b.prefix)
	return b, nil
}

// correctionPhase runs the correction consumer over b's input until every step is sealed and
// fills in the phase's numbers. The consumer keeps running (for the latency phase) until ctx is
// cancelled; runErr then gets its result.
func (rep *CorrectionReport) correctionPhase(ctx context.Context, cfg CorrectionConfig, b benchRun) (runErr chan error, err error) {
	var (
		mu        sync.Mutex
		first     time.Time
		lastSeal  time.Time
		sealed    int
		txns      int
		tripsBase int64
		started   atomic.Bool
		once      sync.Once
	)
	phaseDone := make(chan struct{})
	reg := prometheus.NewRegistry()
	ccfg := correct.Config{
		KafkaOpts: b.consumeOpts, Redis: cfg.Redis, Names: b.names, Group: b.prefix + "correct",
		TransactionalID: b.prefix + "tx", Correction: cfg.Correction, ChunkBytes: cfg.ChunkBytes,
		MaxTxnSteps: cfg.MaxTxnSteps, MaxTxnLinger: cfg.MaxTxnLinger,
		RedisPrefix: b.redisPrefix, Logger: cfg.Logger, Registry: reg,
		OnRecords: func(int) {
			if started.CompareAndSwap(false, true) {
				mu.Lock()
				first = time.Now()
				tripsBase, _ = redisTrips(reg)
				mu.Unlock()
			}
		},
		OnCommit: func(ss []correct.SealedStep) {
			mu.Lock()
			defer mu.Unlock()
			txns++
			sealed += len(ss)
			lastSeal = time.Now()
			if sealed >= b.steps {
				once.Do(func() { close(phaseDone) })
			}
		},
	}
	c, err := correct.NewConsumer(ccfg)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuTime()
	runErr = make(chan error, 1)
	// The label follows every goroutine the consumer starts (its Kafka client's too), so that
	// `go tool pprof -tagfocus phase=correction` shows this phase alone.
	go pprof.Do(ctx, pprof.Labels("phase", "correction"), func(ctx context.Context) { runErr <- c.Run(ctx) })
	select {
	case <-phaseDone:
	case err := <-runErr:
		return nil, fmt.Errorf("correction consumer stopped: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rep.CorrectionCPU = cpuTime() - cpu0
	mu.Lock()
	defer mu.Unlock()
	rep.CorrectionElapsed = lastSeal.Sub(first)
	rep.SealedSteps, rep.Transactions = sealed, txns
	trips, err := redisTrips(reg)
	if err != nil {
		return nil, err
	}
	rep.RedisTrips = trips - tripsBase
	rep.CorrectionPerSec = float64(b.records) / rep.CorrectionElapsed.Seconds()
	rep.Ratio = rep.CorrectionPerSec / rep.PassThroughPerSec
	rep.TripsPerStep = float64(rep.RedisTrips) / float64(rep.SealedSteps)
	rep.TripsPerTxn = float64(rep.RedisTrips) / float64(rep.Transactions)
	return runErr, nil
}

// benchTopics creates the benchmark's topics; cleanup deletes them and its Redis keys unless
// cfg.KeepTopics.
func benchTopics(ctx context.Context, adm *kadm.Client, cfg CorrectionConfig, names topics.Names, passTopic, redisPrefix string) (cleanup func(), err error) {
	plan := topicadmin.DefaultPlan(names)
	plan.Partitions = cfg.Partitions
	plan.RetentionMS = 3600 * 1000
	if _, err := topicadmin.Create(ctx, adm, plan); err != nil {
		return nil, fmt.Errorf("bench topics: %w", err)
	}
	if _, err := adm.CreateTopic(ctx, cfg.Partitions, 1, nil, passTopic); err != nil {
		return nil, fmt.Errorf("bench topics: %w", err)
	}
	if cfg.KeepTopics {
		return func() {}, nil
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, append(names.All(), passTopic)...)
		if err := deleteRedisPrefix(dctx, cfg.Redis, redisPrefix); err != nil {
			cfg.Logger.Warn("bench: the benchmark's Redis keys are left behind", "prefix", redisPrefix, "err", err)
		}
	}, nil
}

func (cfg *CorrectionConfig) setDefaults() {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Partitions = cmp.Or(cfg.Partitions, 3)
	if cfg.Correction == (correction.Config{}) {
		cfg.Correction = correction.DefaultConfig()
	}
	cfg.FetchMaxPartitionBytes = cmp.Or(cfg.FetchMaxPartitionBytes, 1<<20)
}

// redisTrips reads the correction consumer's Redis round-trip counter from its registry.
func redisTrips(g prometheus.Gatherer) (int64, error) {
	const name = "wmrl_correct_redis_roundtrips_total"
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("bench: gather metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return int64(mf.GetMetric()[0].GetCounter().GetValue()), nil
		}
	}
	return 0, fmt.Errorf("bench: the correction consumer exports no %s", name)
}

// deleteRedisPrefix deletes every key under prefix (the correction consumer's --redis-prefix),
// on every master of a Redis Cluster. One DEL a key: a cluster refuses a DEL across slots.
func deleteRedisPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			if err := c.Del(ctx, it.Val()).Err(); err != nil {
				return fmt.Errorf("delete %s: %w", it.Val(), err)
			}
		}
		return it.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	default:
		return fmt.Errorf("bench: cannot scan a %T", rdb)
	}
}
