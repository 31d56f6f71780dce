package correct

import (
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
	res := ReplayResult{FirstStep: -1, LastStep: -1}
	if len(cfg.KafkaOpts) == 0 || !topics.ValidID(cfg.Run) {
		return res, fmt.Errorf("%w: KafkaOpts and a valid run id are required", ErrReplay)
	}
	if cfg.MaxStaleness < 0 {
		return res, fmt.Errorf("%w: MaxStaleness %d must be >= 0", ErrReplay, cfg.MaxStaleness)
	}
	if cfg.Correction == (correction.Config{}) {
		cfg.Correction = correction.DefaultConfig()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.KeepStates == 0 {
		cfg.KeepStates = DefaultKeepStates
	}
	if cfg.Redis != nil && (cfg.RedisPrefix == "" || cfg.RedisPrefix == cfg.StatePrefix || !validPrefix(cfg.RedisPrefix)) {
		return res, fmt.Errorf("%w: RedisPrefix %q must be a valid prefix different from the live namespace %q", ErrReplay, cfg.RedisPrefix, cfg.StatePrefix)
	}
	corr, err := correction.New(cfg.Correction)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	cfg.Limits.PendingSteps, cfg.Limits.PendingGroups, cfg.Limits.ActiveRuns, cfg.Limits.HeldDeadLetters = 0, 0, 0, 0
	limits, err := cfg.Limits.withDefaults(false)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	m, _ := newMetrics(prometheus.NewRegistry())
	eng := newEngine(corr, cfg.Names, cfg.MaxStaleness, limits, m)

	var part int32
	if cfg.Partition != nil {
		part = *cfg.Partition
	} else if part, err = runPartition(ctx, cfg.KafkaOpts, cfg.Names.Steps(), cfg.Run); err != nil {
		return res, err
	}
	readOpts := append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.MaxDecompressBatchBytes(limits.BatchBytes))
	if err := checkSettings(ctx, cfg, readOpts, part, eng.settings); err != nil {
		return res, err
	}
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
			return res, fmt.Errorf("%w: --from-offsets names %q, not an input topic (%v)", ErrReplay, t, inputs)
		}
	}
	if len(cfg.FromOffsets) > 0 && cfg.FromStep > 0 {
		states, err := loadReplayStart(ctx, cfg, corr)
		if err != nil {
			return res, err
		}
		if err := eng.install(cfg.Run, part, states); err != nil {
			return res, err
		}
	}
	var store *statestore.Store
	if cfg.Redis != nil {
		store = statestore.New(cfg.Redis, cfg.RedisPrefix, cfg.KeepStates)
	}
	dig := topics.NewDigest()
	written := map[string]bool{}
	flush := func() error {
		done, err := eng.sealReady()
		if err != nil {
			return err
		}
		eng.takeDeadLetters(nil)
		eng.takeVerdicts() // the live consumer's log and Redis, not the replay's
		for _, s := range done {
			res.LastStep = s.step
			if store != nil {
				ws, _ := sealedWrites([]*sealed{s})
				for i := range ws {
					// A replay namespace starts empty: each stream's first write carries its window.
					ws[i].Full = !written[ws[i].Snap.Stream]
					written[ws[i].Snap.Stream] = true
				}
				if _, err := store.Write(ctx, ws, map[string][]string{s.run: s.newStream}); err != nil {
					return fmt.Errorf("%w: %w", ErrReplay, err)
				}
			}
			if s.step < cfg.FromStep {
				continue
			}
			if res.FirstStep < 0 {
				res.FirstStep = s.step
			}
			res.Steps++
			res.Rows += len(s.rows)
			dig.Add(s.rows...)
			if err := emit(s.step, s.rows); err != nil {
				return err
			}
		}
		return nil
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
		eng.add(r, now)
		if n++; n%4096 == 0 {
			return flush()
		}
		return nil
	}, skip)
	if err != nil {
		return res, fmt.Errorf("%w: read inputs: %w", ErrReplay, err)
	}
	if err := flush(); err != nil {
		return res, err
	}
	res.Digest = dig.Hex()
	res.DeadLetters = eng.deadLettered
	res.SkippedBatches = eng.skippedBatches
	res.Incomplete = eng.bufferedSteps()
	return res, nil
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
