package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// ErrConfig reports an unusable dashboard configuration.
var ErrConfig = errors.New("dashboard: invalid config")

// Config configures a Follower.
type Config struct {
	// KafkaOpts connect to the cluster (seed brokers, TLS, SASL). Required.
	KafkaOpts []kgo.Opt
	// TopicPrefix selects the followed topic sets: every topic whose name starts with it and
	// ends with a wmrl topic suffix (rollouts.v1, …) is read, including topics created later.
	// The part before the suffix is the set's prefix, so "wmrl." follows both wmrl.rollouts.v1
	// and wmrl.demo.wmrl.rollouts.v1. Default topics.DefaultPrefix.
	TopicPrefix string
	// Redis, if set, is polled for the correction consumer's head of every run.
	Redis redis.UniversalClient
	// RedisPrefix maps a topic set's prefix to the Redis key prefix of its correction consumer
	// (`wmrl correct --redis-prefix`); nil maps every set to statestore.DefaultPrefix.
	RedisPrefix func(topicPrefix string) string
	// PollInterval is how often consumer-group lag and Redis are read (default 1 s).
	PollInterval time.Duration
	// MaxPairs bounds the anchor pairs kept per run (default 3000).
	MaxPairs int
	// MaxBatchBytes is the decompressed size above which a record batch is refused unread and
	// skipped (0: topics.MaxBatchBytes(topics.MaxAdvantageBytes), advantages being the largest
	// records followed). The dashboard reads without a group and writes nothing: a skipped batch
	// is logged, counted (State.SkippedBatches) and listed on the page, and met (and skipped)
	// again after a restart, which reads the topics from their start.
	MaxBatchBytes int
	Logger        *slog.Logger
}

// Follower reads the topics and Redis into a Model.
type Follower struct {
	cfg   Config
	model *Model
}

// NewFollower checks cfg and returns a follower with an empty model.
func NewFollower(cfg Config) (*Follower, error) {
	if len(cfg.KafkaOpts) == 0 {
		return nil, fmt.Errorf("%w: no Kafka options (seed brokers)", ErrConfig)
	}
	cfg.TopicPrefix = cmp.Or(cfg.TopicPrefix, topics.DefaultPrefix)
	if cfg.RedisPrefix == nil {
		cfg.RedisPrefix = func(string) string { return statestore.DefaultPrefix }
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.MaxPairs <= 0 {
		cfg.MaxPairs = 3000
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = topics.MaxBatchBytes(topics.MaxAdvantageBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Follower{cfg: cfg, model: NewModel(cfg.TopicPrefix, cfg.MaxPairs)}, nil
}

// Model is the follower's model, to serve with Handler.
func (f *Follower) Model() *Model { return f.model }

// topicRegex matches every followed topic under prefix.
func topicRegex(prefix string) string {
	var suffixes []string
	for s := range stageOf {
		suffixes = append(suffixes, regexp.QuoteMeta(s))
	}
	sort.Strings(suffixes)
	return "^" + regexp.QuoteMeta(prefix) + ".*(" + strings.Join(suffixes, "|") + ")$"
}

// Run follows until ctx ends. It returns nil when ctx ends, or the error that stopped it.
func (f *Follower) Run(ctx context.Context) error {
	opts := append(slices.Clone(f.cfg.KafkaOpts),
		kgo.ConsumeRegex(), kgo.ConsumeTopics(topicRegex(f.cfg.TopicPrefix)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// New topic sets (a demo's arms, a new deployment) show up within a second or two.
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(2*time.Second),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.MaxDecompressBatchBytes(f.cfg.MaxBatchBytes),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("dashboard: kafka client: %w", err)
	}
	defer cl.Close()
	skip := oversize.NewSkipper(cl, f.cfg.Logger, nil, "listed on the page (the dashboard writes no dead letters)")
	var wg sync.WaitGroup
	wg.Go(func() { f.poll(ctx, kadm.NewClient(cl)) })
	defer wg.Wait()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, ref := range skip.Skip(fs) {
			f.model.SkippedBatch(ref)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !oversize.Refused(err) {
				f.model.Error(fmt.Sprintf("fetch %s[%d]: %v", topic, p, err))
			}
		})
		fs.EachRecord(f.apply)
	}
}

// apply decodes one record into the model. Undecodable records are reported on the page, not
// fatal: the dashboard shows what is there.
func (f *Follower) apply(r *kgo.Record) {
	prefix, suffix, ok := splitTopic(r.Topic)
	if !ok {
		return
	}
	fail := func(err error) {
		f.model.Count(r.Topic)
		f.model.Error(fmt.Sprintf("%s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err))
	}
	switch suffix {
	case topics.SuffixPredicted, topics.SuffixExecuted:
		run, _ := topics.HeaderValue(r.Headers, topics.HeaderRun)
		stream, _ := topics.HeaderValue(r.Headers, topics.HeaderStream)
		sv, _ := topics.HeaderValue(r.Headers, topics.HeaderStep)
		step, err := topics.ParseStep(sv)
		if err != nil || run == "" || stream == "" {
			// The record is still counted; only the step's latency misses it.
			f.model.Count(r.Topic)
			return
		}
		f.model.Reward(r.Topic, prefix, run, stream, step, r.Timestamp, rewardFailure(suffix, r))
	case topics.SuffixAdvantages:
		rows, err := topics.DecodeAdvantageRecord(r)
		if err != nil {
			fail(err)
			return
		}
		f.model.Advantages(r.Topic, prefix, rows, r.Timestamp)
	case topics.SuffixSteps:
		m, err := topics.DecodeStepRecord(r)
		if err != nil {
			// Bad manifests are correct's to dead-letter; the page counts the record only.
			f.model.Count(r.Topic)
			return
		}
		f.model.Manifest(r.Topic, prefix, m, r.Timestamp)
	case topics.SuffixCalibration:
		if r.Value != nil && topics.IsCalibrationEnd(r) {
			e, err := topics.DecodeCalibrationEndRecord(r)
			if err != nil {
				fail(err)
				return
			}
			f.model.End(r.Topic, prefix, e)
			return
		}
		if r.Value == nil || topics.IsCalibrationChunk(r) {
			f.model.Count(r.Topic) // a compaction tombstone or a window chunk of a state
			return
		}
		s, err := topics.DecodeCalibrationRecord(r)
		if err != nil {
			fail(err)
			return
		}
		f.model.Snapshot(r.Topic, prefix, s, r.Timestamp)
	case topics.SuffixDLQ:
		d, err := topics.ParseDeadLetter(r)
		if err != nil {
			fail(err)
			return
		}
		f.model.DeadLetter(r.Topic, prefix, d.Stage, d.Reason, d.Error)
	default:
		f.model.Count(r.Topic)
	}
}

// poll reads consumer-group lag and the Redis heads every PollInterval.
func (f *Follower) poll(ctx context.Context, adm *kadm.Client) {
	t := time.NewTicker(f.cfg.PollInterval)
	defer t.Stop()
	for {
		f.pollGroups(ctx, adm)
		f.pollRedis(ctx)
		f.model.Tick()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (f *Follower) pollGroups(ctx context.Context, adm *kadm.Client) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	listed, err := adm.ListGroups(pctx)
	if err != nil {
		if ctx.Err() == nil {
			f.model.Error(fmt.Sprintf("list consumer groups: %v", err))
		}
		return
	}
	names := listed.Groups()
	if len(names) == 0 {
		f.model.SetGroups(nil)
		return
	}
	lags, err := adm.Lag(pctx, names...)
	if err != nil {
		if ctx.Err() == nil {
			f.model.Error(fmt.Sprintf("consumer group lag: %v", err))
		}
		return
	}
	var out []GroupLag
	for _, g := range lags.Sorted() {
		if err := g.Error(); err != nil {
			out = append(out, GroupLag{Group: g.Group, State: g.State, Members: len(g.Members), Error: err.Error()})
			continue
		}
		perTopic := map[string]int64{}
		for _, l := range g.Lag.Sorted() {
			if _, _, ok := splitTopic(l.Topic); !ok || !strings.HasPrefix(l.Topic, f.cfg.TopicPrefix) {
				continue
			}
			if l.Err != nil {
				continue
			}
			perTopic[l.Topic] += max(l.Lag, 0)
		}
		for _, topic := range slices.Sorted(maps.Keys(perTopic)) {
			out = append(out, GroupLag{Group: g.Group, Topic: topic, State: g.State, Members: len(g.Members), Lag: perTopic[topic]})
		}
	}
	f.model.SetGroups(out)
}

func (f *Follower) pollRedis(ctx context.Context) {
	if f.cfg.Redis == nil {
		return
	}
	for _, k := range f.model.RunKeys() {
		prefix := f.cfg.RedisPrefix(k.prefix)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		store := statestore.New(f.cfg.Redis, prefix, 1)
		h, err := store.ReadHead(rctx, k.run, k.stream)
		if err == nil && f.model.NeedsMap(k, h.FitVersion) {
			if mp, merr := redisMap(rctx, store, k, h.SealedStep); merr != nil {
				f.model.Error(merr.Error())
			} else {
				f.model.SetRedisMap(k, mp)
			}
		}
		cancel()
		head := &RedisHead{Prefix: prefix, SealedStep: -1}
		switch {
		case errors.Is(err, redis.Nil):
			f.model.RedisMissing(k, prefix)
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			head.State, head.Error = HeadError, err.Error()
		default:
			head.State = HeadOK
			head.SealedStep, head.FitVersion, head.AnchorWeight, head.Pairs, head.Digest = h.SealedStep, h.FitVersion, h.AnchorWeight, h.Pairs, h.Digest
		}
		f.model.SetRedis(k, head)
	}
}
