package correct

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// ReplayConfig configures Replay. KafkaOpts and Run are required.
type ReplayConfig struct {
	KafkaOpts []kgo.Opt
	Names     topics.Names
	Run       string
	// FromStep: steps before it are recomputed (fresh state) but not emitted; with FromOffsets
	// they are not recomputed at all and the state sealed after FromStep−1 is loaded instead.
	FromStep int64
	// FromOffsets starts reading the run's partition of each input topic (keys: full topic names)
	// at these offsets instead of the earliest retained one, for inputs that retention trimmed.
	// The state after FromStep−1 then comes from the live Redis namespace StatePrefix.
	FromOffsets map[string]int64
	// Partition is the run's partition number; nil computes it from the run id with the default
	// (murmur2) key partitioner, which is where wmrl's producers put it.
	Partition *int32
	// Correction, MaxStaleness and Limits (zero fields take the defaults; per-instance limits do
	// not apply) make the replay's DigestConfig, which must be the live consumer's for the digests
	// to match: Replay refuses (ErrSettingsChanged) when the run's newest calibration snapshot
	// records another, unless AllowConfigChange.
	Correction        correction.Config
	MaxStaleness      int64
	Limits            Limits
	AllowConfigChange bool
	// Redis, when set, receives the replayed states under RedisPrefix (an isolated namespace:
	// it must differ from the live one, StatePrefix, which is where FromOffsets loads from).
	Redis       redis.UniversalClient
	RedisPrefix string
	StatePrefix string
	KeepStates  int
	Timeout     time.Duration // bounds reading the inputs (default 5 min)
	Logger      *slog.Logger
}

// ReplayResult summarises a replay.
type ReplayResult struct {
	Steps       int    // steps emitted
	Rows        int    // rows emitted
	Digest      string // topics.Digest over the emitted rows in canonical order
	FirstStep   int64  // first emitted step (-1 if none)
	LastStep    int64  // last sealed step (-1 if none)
	DeadLetters int    // input records the live consumer would have dead-lettered
	// SkippedBatches counts the record batches of the run's partitions skipped unread (over
	// MaxBatchBytes; each is among DeadLetters).
	SkippedBatches int
	Incomplete     int // buffered steps that never completed (inputs missing from the topics)
}

// Replay re-runs correction for one run from the retained input topics with fresh state (the
// same engine as the live consumer, so the rows are bit-identical) and calls emit with every
// sealed step's rows in canonical order, in step order.
func Replay(ctx context.Context, cfg ReplayConfig, emit func(step int64, rows []topics.AdvantageRow) error) (ReplayResult, error) {
	rp := replay{res: ReplayResult{FirstStep: -1, LastStep: -1}, fromStep: cfg.FromStep, emit: emit,
		dig: topics.NewDigest(), written: map[string]bool{}}
	eng, corr, err := cfg.engine()
	if err != nil {
		return rp.res, err
	}
	rp.eng = eng
	var part int32
	if cfg.Partition != nil {
		part = *cfg.Partition
	} else if part, err = runPartition(ctx, cfg.KafkaOpts, cfg.Names.Steps(), cfg.Run); err != nil {
		return rp.res, err
	}
	readOpts := append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.MaxDecompressBatchBytes(eng.limits.BatchBytes))
	if err := checkSettings(ctx, cfg, readOpts, part, eng.settings); err != nil {
		return rp.res, err
	}
	start, err := replayOffsets(cfg, part)
	if err != nil {
		return rp.res, err
	}
	if len(cfg.FromOffsets) > 0 && cfg.FromStep > 0 {
		states, err := loadReplayStart(ctx, cfg, corr)
		if err != nil {
			return rp.res, err
		}
		if err := eng.install(cfg.Run, part, states); err != nil {
			return rp.res, err
		}
	}
	if cfg.Redis != nil {
		rp.store = statestore.New(cfg.Redis, cfg.RedisPrefix, cfg.KeepStates)
	}
	now := time.Now()
	n := 0
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// The live consumer skips the same batches (skip.go): none of their records reach either
	// engine, and both dead-letter them.
	skip := topicread.OnBatchTooLarge(func(ref topics.BatchRef) error {
		eng.skipBatch(ref)
		return nil
	})
	err = topicread.ToEnd(rctx, readOpts, start, cfg.Timeout/2, cfg.Logger, func(r *kgo.Record) error {
		if string(r.Key) != cfg.Run {
			return nil
		}
		eng.add(rctx, r, now)
		if rctx.Err() != nil {
			return rctx.Err() // a registry that never answered: apply nothing more
		}
		if n++; n%4096 == 0 {
			return rp.flush(ctx)
		}
		return nil
	}, skip)
	if err != nil {
		return rp.res, fmt.Errorf("%w: read inputs: %w", ErrReplay, err)
	}
	if err := rp.flush(ctx); err != nil {
		return rp.res, err
	}
	rp.res.Digest = rp.dig.Hex()
	rp.res.DeadLetters = eng.deadLettered
	rp.res.SkippedBatches = eng.skippedBatches
	rp.res.Incomplete = eng.bufferedSteps()
	return rp.res, nil
}

// engine checks cfg, fills its defaults and builds the engine a replay runs: the live consumer's
// settings, without the per-instance limits.
func (cfg *ReplayConfig) engine() (*engine, *correction.Corrector, error) {
	if len(cfg.KafkaOpts) == 0 || !topics.ValidID(cfg.Run) {
		return nil, nil, fmt.Errorf("%w: KafkaOpts and a valid run id are required", ErrReplay)
	}
	if cfg.MaxStaleness < 0 {
		return nil, nil, fmt.Errorf("%w: MaxStaleness %d must be >= 0", ErrReplay, cfg.MaxStaleness)
	}
	if cfg.Redis != nil && (cfg.RedisPrefix == "" || cfg.RedisPrefix == cfg.StatePrefix || !validPrefix(cfg.RedisPrefix)) {
		return nil, nil, fmt.Errorf("%w: RedisPrefix %q must be a valid prefix different from the live namespace %q", ErrReplay, cfg.RedisPrefix, cfg.StatePrefix)
	}
	cfg.Correction = cmp.Or(cfg.Correction, correction.DefaultConfig())
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Timeout = cmp.Or(cfg.Timeout, 5*time.Minute)
	cfg.KeepStates = cmp.Or(cfg.KeepStates, DefaultKeepStates)
	corr, err := correction.New(cfg.Correction)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	cfg.Limits.PendingSteps, cfg.Limits.PendingGroups, cfg.Limits.ActiveRuns, cfg.Limits.HeldDeadLetters = 0, 0, 0, 0
	limits, err := cfg.Limits.withDefaults(false)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	m, _ := newMetrics(prometheus.NewRegistry())
	return newEngine(corr, cfg.Names, cfg.MaxStaleness, limits, m), corr, nil
}

// replayOffsets is where a replay reads the run's partition of each input topic.
func replayOffsets(cfg ReplayConfig, part int32) (map[string]map[int32]kgo.Offset, error) {
	inputs := inputTopics(cfg.Names)
	start := map[string]map[int32]kgo.Offset{}
	for _, t := range inputs {
		o := kgo.NewOffset().AtStart()
		if off, ok := cfg.FromOffsets[t]; ok {
			o = kgo.NewOffset().At(off)
		}
		start[t] = map[int32]kgo.Offset{part: o}
	}
	for t := range cfg.FromOffsets {
		if _, ok := start[t]; !ok {
			return nil, fmt.Errorf("%w: --from-offsets names %q, not an input topic (%v)", ErrReplay, t, inputs)
		}
	}
	return start, nil
}

// replay is a running Replay: its engine, where the replayed states go, and what it emitted.
type replay struct {
	eng      *engine
	store    *statestore.Store // nil without ReplayConfig.Redis
	written  map[string]bool   // the streams whose window the store holds
	fromStep int64
	emit     func(step int64, rows []topics.AdvantageRow) error
	dig      *topics.Digest
	res      ReplayResult
}

// flush seals the steps that are ready, stores their states and emits their rows.
func (rp *replay) flush(ctx context.Context) error {
	done, err := rp.eng.sealReady()
	if err != nil {
		return err
	}
	rp.eng.takeDeadLetters(nil)
	rp.eng.takeVerdicts() // the live consumer's log and Redis, not the replay's
	for _, s := range done {
		rp.res.LastStep = s.step
		if rp.store != nil {
			ws, _ := sealedWrites([]*sealed{s})
			for i := range ws {
				// A replay namespace starts empty: each stream's first write carries its window.
				ws[i].Full = !rp.written[ws[i].Snap.Stream]
				rp.written[ws[i].Snap.Stream] = true
			}
			if _, err := rp.store.Write(ctx, ws, map[string][]string{s.run: s.newStream}); err != nil {
				return fmt.Errorf("%w: %w", ErrReplay, err)
			}
		}
		if s.step < rp.fromStep {
			continue
		}
		if rp.res.FirstStep < 0 {
			rp.res.FirstStep = s.step
		}
		rp.res.Steps++
		rp.res.Rows += len(s.rows)
		rp.dig.Add(s.rows...)
		if err := rp.emit(s.step, s.rows); err != nil {
			return err
		}
	}
	return nil
}

// loadReplayStart reads the states sealed after FromStep−1 of every stream of the run from the
// live Redis namespace (the versioned snapshots kept there exist for this).
func loadReplayStart(ctx context.Context, cfg ReplayConfig, corr *correction.Corrector) ([]*correction.State, error) {
	if cfg.Redis == nil || cfg.StatePrefix == "" {
		return nil, fmt.Errorf("%w: --from-offsets with --from-step > 0 needs Redis and the live namespace to load the state after step %d", ErrReplay, cfg.FromStep-1)
	}
	live := statestore.New(cfg.Redis, cfg.StatePrefix, cfg.KeepStates)
	streams, err := live.Streams(ctx, cfg.Run)
	if err != nil {
		return nil, fmt.Errorf("%w: streams of run %s: %w", ErrReplay, cfg.Run, err)
	}
	if len(streams) == 0 {
		return nil, fmt.Errorf("%w: no streams of run %s recorded under %s", ErrReplay, cfg.Run, live.StreamsKey(cfg.Run))
	}
	var out []*correction.State
	for _, s := range streams {
		b, err := live.ReadState(ctx, cfg.Run, s, cfg.FromStep-1)
		if err != nil {
			return nil, fmt.Errorf("%w: state of %s/%s after step %d (%s): %w (only the last %d steps are kept)",
				ErrReplay, cfg.Run, s, cfg.FromStep-1, live.StateKey(cfg.Run, s, cfg.FromStep-1), err, cfg.KeepStates)
		}
		st, err := correction.DecodeState(b)
		if err != nil {
			return nil, fmt.Errorf("%w: state of %s/%s: %w", ErrReplay, cfg.Run, s, err)
		}
		if st.ConfigHash() != corr.Hash() {
			return nil, fmt.Errorf("%w: state of %s/%s: %w", ErrReplay, cfg.Run, s, ErrConfigChanged)
		}
		out = append(out, st)
	}
	return out, nil
}

// runPartition computes the partition the default key partitioner puts run on.
func runPartition(ctx context.Context, opts []kgo.Opt, topic, run string) (int32, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("%w: kafka client: %w", ErrReplay, err)
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("%w: list %s: %w", ErrReplay, topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("%w: topic %s not found", ErrReplay, topic)
	}
	return topics.PartitionFor(run, len(d.Partitions)), nil
}
