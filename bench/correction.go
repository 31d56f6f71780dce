package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"runtime/pprof"
	"slices"
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

// CorrectionReport is the result of Benchmark.
type CorrectionReport struct {
	Records           int
	PassThroughPerSec float64
	CorrectionPerSec  float64
	Ratio             float64
	SealedSteps       int
	Transactions      int
	RedisTrips        int64
	TripsPerStep      float64
	TripsPerTxn       float64
	LatencyP50        time.Duration
	LatencyP99        time.Duration
	LatencySamples    int
	// LatencyCPU is the process's CPU time during the latency phase, where every step is its own
	// transaction: an upper bound on a sparse live step's cost, since it includes the probe's
	// producer and read_committed reader, which run in the same process.
	LatencyCPU         time.Duration
	PassThroughElapsed time.Duration
	CorrectionElapsed  time.Duration
	// PassThroughCPU and CorrectionCPU are the process's CPU time (user + system) during each phase.
	PassThroughCPU time.Duration
	CorrectionCPU  time.Duration
	// CalibrationBytes is the size of the calibration topic's log on the broker after the
	// throughput phase; per sealed (run, stream) step it is CalibrationBytesPerStep.
	CalibrationBytes        int64
	CalibrationBytesPerStep float64
	// TopicBytes, by topic suffix (topics.SuffixSteps, …), is the size of every benchmark topic's
	// log on the broker (one replica) after the throughput phase wrote SealedSteps run steps to
	// them: the inputs, as the generator, world-model and sandbox stages would write them, and
	// the correction consumer's outputs, batch headers and transaction markers included.
	TopicBytes map[string]int64
	// SparseTopicBytes is what the latency phase added to each log, LatencySamples steps of one
	// run, each step its own transaction (as steps arriving one at a time are).
	SparseTopicBytes map[string]int64
	// RebuildStreams (run, stream) states were rebuilt from the calibration topic in RebuildTime,
	// growing the live heap by RebuildHeapBytes.
	RebuildStreams   int
	RebuildTime      time.Duration
	RebuildHeapBytes int64
}

// String is the report as `wmrl bench correction` prints it; bench/capacity_table.py parses its
// lines (records per CPU-second, broker bytes per run step, CPU per step), so keep their prefixes.
func (r CorrectionReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "records                      %d (steps, predicted, executed)\n", r.Records)
	fmt.Fprintf(&b, "pass-through txn consume→produce  %10.0f records/s  (%v)\n", r.PassThroughPerSec, r.PassThroughElapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "correction consumer               %10.0f records/s  (%v)\n", r.CorrectionPerSec, r.CorrectionElapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "ratio correction / pass-through   %10.3f\n", r.Ratio)
	fmt.Fprintf(&b, "calibration bytes per sealed (run, stream) step: %.0f  (broker log %d bytes)\n", r.CalibrationBytesPerStep, r.CalibrationBytes)
	fmt.Fprintf(&b, "rebuild from the changelog: %d (run, stream) states in %v, live heap +%.1f MiB\n",
		r.RebuildStreams, r.RebuildTime.Round(time.Millisecond), float64(r.RebuildHeapBytes)/(1<<20))
	fmt.Fprintf(&b, "process CPU: correction %.2fs, pass-through %.2fs (ratio %.2f)\n",
		r.CorrectionCPU.Seconds(), r.PassThroughCPU.Seconds(), r.CorrectionCPU.Seconds()/r.PassThroughCPU.Seconds())
	fmt.Fprintf(&b, "correction records per CPU-second (records/s per core): %.0f\n", r.RecordsPerCPUSecond())
	perStep := func(what string, bytes map[string]int64, steps int) {
		if steps == 0 || len(bytes) == 0 {
			return
		}
		fmt.Fprintf(&b, "broker log bytes per run step, %s (one replica):", what)
		for _, t := range slices.Sorted(maps.Keys(bytes)) {
			fmt.Fprintf(&b, " %s=%.0f", t, float64(bytes[t])/float64(steps))
		}
		b.WriteString("\n")
	}
	perStep("backlog", r.TopicBytes, r.SealedSteps)
	perStep("one step per transaction", r.SparseTopicBytes, r.LatencySamples)
	fmt.Fprintf(&b, "sealed steps %d in %d transactions; Redis round trips %d: %.3f per sealed step, %.3f per transaction\n",
		r.SealedSteps, r.Transactions, r.RedisTrips, r.TripsPerStep, r.TripsPerTxn)
	fmt.Fprintf(&b, "latency last reward → advantages visible (read_committed), %d steps: p50 %v  p99 %v\n",
		r.LatencySamples, r.LatencyP50.Round(time.Microsecond), r.LatencyP99.Round(time.Microsecond))
	if r.LatencySamples > 0 {
		fmt.Fprintf(&b, "CPU per step when each step is its own transaction (latency phase, probe included): %v\n",
			(r.LatencyCPU / time.Duration(r.LatencySamples)).Round(time.Microsecond))
	}
	return b.String()
}

// RecordsPerCPUSecond is the input records the correction consumer processed per second of the
// process's CPU time during its phase: its throughput per core, whatever GOMAXPROCS is.
func (r CorrectionReport) RecordsPerCPUSecond() float64 {
	if r.CorrectionCPU <= 0 {
		return 0
	}
	return float64(r.Records) / r.CorrectionCPU.Seconds()
}

// Benchmark measures, on one broker in one run: records/s through the correction consumer versus a
// pass-through transactional consume→produce of the same input records; Redis round trips per
// sealed step; and the latency from a step's last reward to its advantages being visible to a
// read_committed consumer. It creates (and deletes) its own topics under a fresh prefix.
func Correction(ctx context.Context, cfg CorrectionConfig) (CorrectionReport, error) {
	var rep CorrectionReport
	cfg.setDefaults()
	consumeOpts := append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.FetchMaxPartitionBytes(cfg.FetchMaxPartitionBytes))
	prefix := fmt.Sprintf("wmrl-bench-%d.", time.Now().UnixNano())
	names := topics.NewNames(prefix)
	names.Format = cfg.Format
	if cfg.Registry != nil {
		ss, err := schemareg.Schemas(names)
		if err != nil {
			return rep, err
		}
		if _, err := cfg.Registry.Register(ctx, ss...); err != nil {
			return rep, fmt.Errorf("bench: %w", err)
		}
		names.Registry = cfg.Registry
	}
	admCl, err := kgo.NewClient(cfg.KafkaOpts...)
	if err != nil {
		return rep, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	passTopic := prefix + "passthrough"
	redisPrefix := strings.TrimSuffix(prefix, ".")
	cleanup, err := benchTopics(ctx, adm, cfg, names, passTopic, redisPrefix)
	if err != nil {
		return rep, err
	}
	defer cleanup()

	steps, err := workload.Synthesize(names, cfg.Workload)
	if err != nil {
		return rep, err
	}
	recs := flattenSteps(steps)
	rep.Records = len(recs)
	if err := produceCopies(ctx, cfg.KafkaOpts, recs); err != nil {
		return rep, err
	}
	cfg.Logger.Info("bench: inputs written", "records", len(recs), "prefix", prefix)

	// Phase 1: pass-through.
	cpu0 := cpuTime()
	pprof.Do(ctx, pprof.Labels("phase", "passthrough"), func(ctx context.Context) {
		rep.PassThroughElapsed, err = passThrough(ctx, consumeOpts, names, passTopic, prefix+"pass", len(recs))
	})
	if err != nil {
		return rep, fmt.Errorf("pass-through: %w", err)
	}
	rep.PassThroughCPU = cpuTime() - cpu0
	rep.PassThroughPerSec = float64(len(recs)) / rep.PassThroughElapsed.Seconds()

	// Phase 2: the correction consumer over the same records, then the latency phase.
	var (
		mu        sync.Mutex
		first     time.Time
		lastSeal  time.Time
		sealed    int
		txns      int
		tripsBase int64
		c         *correct.Consumer
		started   atomic.Bool
	)
	wantSteps := len(steps)
	phaseDone := make(chan struct{})
	var once sync.Once
	reg := prometheus.NewRegistry()
	ccfg := correct.Config{
		KafkaOpts: consumeOpts, Redis: cfg.Redis, Names: names, Group: prefix + "correct",
		TransactionalID: prefix + "tx", Correction: cfg.Correction, ChunkBytes: cfg.ChunkBytes,
		MaxTxnSteps: cfg.MaxTxnSteps, MaxTxnLinger: cfg.MaxTxnLinger,
		RedisPrefix: redisPrefix, Logger: cfg.Logger, Registry: reg,
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
			if sealed >= wantSteps {
				once.Do(func() { close(phaseDone) })
			}
		},
	}
	lat := &latencyProbe{}
	if c, err = correct.NewConsumer(ccfg); err != nil {
		return rep, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cpu0 = cpuTime()
	runErr := make(chan error, 1)
	// The label follows every goroutine the consumer starts (its Kafka client's too), so that
	// `go tool pprof -tagfocus phase=correction` shows this phase alone.
	go pprof.Do(cctx, pprof.Labels("phase", "correction"), func(ctx context.Context) { runErr <- c.Run(ctx) })
	select {
	case <-phaseDone:
	case err := <-runErr:
		return rep, fmt.Errorf("correction consumer stopped: %w", err)
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	rep.CorrectionCPU = cpuTime() - cpu0
	mu.Lock()
	rep.CorrectionElapsed = lastSeal.Sub(first)
	rep.SealedSteps, rep.Transactions = sealed, txns
	trips, err := redisTrips(reg)
	rep.RedisTrips = trips - tripsBase
	mu.Unlock()
	if err != nil {
		return rep, err
	}
	rep.CorrectionPerSec = float64(len(recs)) / rep.CorrectionElapsed.Seconds()
	rep.Ratio = rep.CorrectionPerSec / rep.PassThroughPerSec
	rep.TripsPerStep = float64(rep.RedisTrips) / float64(rep.SealedSteps)
	rep.TripsPerTxn = float64(rep.RedisTrips) / float64(rep.Transactions)
	if rep.TopicBytes, err = topicLogBytes(ctx, adm, names, cfg.Partitions); err != nil {
		return rep, err
	}

	if cfg.LatencySteps > 0 {
		if err := rep.latencyPhase(ctx, lat, cfg, adm, names); err != nil {
			return rep, err
		}
	}
	cancel()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		return rep, err
	}
	// After the consumer stopped, so that its buffers do not blur the heap measurement.
	if err := changelogCost(ctx, &rep, adm, cfg, consumeOpts, names); err != nil {
		return rep, err
	}
	return rep, nil
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

// latencyPhase measures the step latency of sparse steps (cfg.LatencySteps) with the consumer
// still running, and the topic bytes they added.
func (rep *CorrectionReport) latencyPhase(ctx context.Context, lat *latencyProbe, cfg CorrectionConfig, adm *kadm.Client, names topics.Names) error {
	cpu0 := cpuTime()
	samples, err := lat.run(ctx, cfg, names)
	rep.LatencyCPU = cpuTime() - cpu0
	if err != nil {
		return fmt.Errorf("latency phase: %w", err)
	}
	after, err := topicLogBytes(ctx, adm, names, cfg.Partitions)
	if err != nil {
		return err
	}
	rep.SparseTopicBytes = make(map[string]int64, len(after))
	for t, n := range after {
		rep.SparseTopicBytes[t] = n - rep.TopicBytes[t]
	}
	slices.Sort(samples)
	rep.LatencySamples = len(samples)
	if len(samples) > 0 {
		rep.LatencyP50 = samples[len(samples)/2]
		rep.LatencyP99 = samples[min(len(samples)-1, int(float64(len(samples))*0.99))]
	}
	return nil
}

func flattenSteps(steps []workload.Step) []*kgo.Record {
	var out []*kgo.Record
	for _, s := range steps {
		out = append(out, s.Records()...)
	}
	return out
}

func produceCopies(ctx context.Context, opts []kgo.Opt, recs []*kgo.Record) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(pctx, cp...).FirstErr(); err != nil {
		return fmt.Errorf("produce inputs: %w", err)
	}
	return nil
}

// passThrough copies every input record to out in transactions (one per poll), committing input
// offsets in the same transaction: the minimum any EOS consume→produce stage costs.
func passThrough(ctx context.Context, opts []kgo.Opt, names topics.Names, out, id string, want int) (time.Duration, error) {
	sess, err := kgo.NewGroupTransactSession(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumerGroup(id), kgo.ConsumeTopics(names.Steps(), names.Predicted(), names.Executed()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.TransactionalID(id),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.RangeBalancer()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	var first time.Time
	n := 0
	for n < want {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fs := sess.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			batch = append(batch, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers})
		})
		if len(batch) == 0 {
			continue
		}
		if first.IsZero() {
			first = time.Now()
		}
		if err := sess.Begin(); err != nil {
			return 0, err
		}
		var perr error
		var pmu sync.Mutex
		for _, r := range batch {
			sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					pmu.Lock()
					perr = err
					pmu.Unlock()
				}
			})
		}
		committed, err := sess.End(ctx, kgo.TransactionEndTry(perr == nil))
		if err != nil {
			return 0, err
		}
		if committed {
			n += len(batch)
		}
	}
	return time.Since(first), nil
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

// latencyProbe times single steps: all of a step's records but its last reward are produced,
// then the last reward; the clock runs from that produce's acknowledgement until every chunk of
// the step is visible to a read_committed consumer of the advantages topic.
type latencyProbe struct{}

func (p *latencyProbe) run(ctx context.Context, cfg CorrectionConfig, names topics.Names) ([]time.Duration, error) {
	wl := cfg.Workload
	wl.Runs, wl.Steps, wl.RunPrefix = 1, cfg.LatencySteps, "latency"
	steps, err := workload.Synthesize(names, wl)
	if err != nil {
		return nil, err
	}
	reader, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.KafkaOpts...),
		kgo.ConsumeTopics(names.Advantages()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(50*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	// Make sure the reader has its start offsets before the first step is produced.
	for i := 0; i < 3; i++ {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		reader.PollFetches(pctx)
		cancel()
	}
	producer, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	seen := map[string]int{}
	var out []time.Duration
	for _, s := range steps {
		recs := s.Records()
		cp := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := producer.ProduceSync(pctx, cp[:len(cp)-1]...).FirstErr(); err != nil {
			cancel()
			return nil, err
		}
		if err := producer.ProduceSync(pctx, cp[len(cp)-1]).FirstErr(); err != nil {
			cancel()
			return nil, err
		}
		cancel()
		t0 := time.Now()
		key := fmt.Sprintf("%s/%d", s.Run, s.Step)
		deadline := time.Now().Add(30 * time.Second)
		complete := false
		for !complete {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("step %s not visible after 30s", key)
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := reader.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fs.EachRecord(func(r *kgo.Record) {
				run, _ := topics.HeaderValue(r.Headers, topics.HeaderRun)
				step, _ := topics.HeaderValue(r.Headers, topics.HeaderStep)
				ch, _ := topics.HeaderValue(r.Headers, topics.HeaderChunk)
				_, n, err := topics.ParseChunk(ch)
				if err != nil {
					return
				}
				k := run + "/" + step
				seen[k]++
				if k == key && seen[k] == n {
					complete = true
				}
			})
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// changelogCost measures the calibration topic's log size on the broker and the time and heap it
// takes to rebuild every (run, stream) state from it.
func changelogCost(ctx context.Context, rep *CorrectionReport, adm *kadm.Client, cfg CorrectionConfig, opts []kgo.Opt, names topics.Names) error {
	parts := make([]int32, cfg.Partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	// The throughput phase's steps only (the latency phase's are on the log too, and rebuilt).
	rep.CalibrationBytes = rep.TopicBytes[topics.SuffixCalibration]
	rep.CalibrationBytesPerStep = float64(rep.CalibrationBytes) / float64(rep.SealedSteps*max(cfg.Workload.Streams, 1))
	start := time.Now()
	states, err := correct.RebuildFromChangelog(ctx, opts, names, parts, 2*time.Minute, cfg.Logger)
	if err != nil {
		return fmt.Errorf("rebuild from the changelog: %w", err)
	}
	rep.RebuildTime = time.Since(start)
	rep.RebuildStreams = len(states)
	rep.RebuildHeapBytes = retainedBy(func() { states = nil })
	return nil
}

// topicLogBytes returns the size of each topic's log on the brokers by topic suffix (every
// replica's log dir summed, so one replica on a single broker), from DescribeLogDirs.
func topicLogBytes(ctx context.Context, adm *kadm.Client, names topics.Names, partitions int32) (map[string]int64, error) {
	var set kadm.TopicsSet
	for _, t := range names.All() {
		for p := range partitions {
			set.Add(t, p)
		}
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("topic log sizes: %w", err)
	}
	out := make(map[string]int64)
	dirs.Each(func(d kadm.DescribedLogDir) {
		for t, ps := range d.Topics {
			for _, p := range ps {
				out[strings.TrimPrefix(t, names.EffectivePrefix())] += p.Size
			}
		}
	})
	return out, nil
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

// retainedBy returns how much the live heap shrinks when release drops the references it holds.
func retainedBy(release func()) int64 {
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	release()
	runtime.GC()
	runtime.ReadMemStats(&without)
	return int64(with.HeapAlloc) - int64(without.HeapAlloc)
}
