package correct

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/retry"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/statestore"
)

// Consumer is the stateful, exactly-once correction stage.
type Consumer struct {
	cfg    Config
	log    *slog.Logger
	corr   *correction.Corrector
	m      *metrics
	store  *statestore.Store
	eng    *engine
	khooks []kgo.Hook // kprom series (stage.KafkaMetrics)
	// skipCount is wmrl_stage_batches_skipped_total{stage="correct"} (skip.go).
	skipCount *prometheus.CounterVec

	mu       sync.Mutex
	assigned map[int32]bool // partition numbers of the input topics we own
	changed  bool           // assignment changed since the last reload

	healthy atomic.Bool
	outage  outageState
	stats   progress
	masked  maskedWarner // loop only
	// redisDone is closed when the Redis write in flight finishes (nil: none); loop only.
	redisDone chan struct{}
	// flood is the state of the rate-limited flood warning (flood.go); loop only.
	flood floodLog
	// lifecycleAt is when the ended-run retention and the idle timeout were last checked; loop only.
	lifecycleAt time.Time
}

type progress struct {
	steps, rows, txns, aborts, dlq int64
}

// NewConsumer validates cfg and prepares a consumer; Run starts it.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	corr, err := correction.New(cfg.Correction)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("correct: metrics: %w", err)
	}
	skipCount := oversize.NewCounter("correct")
	if err := cfg.Registry.Register(skipCount); err != nil {
		return nil, fmt.Errorf("correct: metrics: %w", err)
	}
	cfg.Redis.AddHook(tripHook{m})
	c := &Consumer{
		cfg:       cfg,
		log:       cfg.Logger.With("stage", "correct"),
		corr:      corr,
		m:         m,
		store:     statestore.New(cfg.Redis, cfg.RedisPrefix, cfg.KeepStates),
		eng:       newEngine(corr, cfg.Names, cfg.MaxStaleness, cfg.Limits, m),
		khooks:    stage.KafkaMetrics(cfg.Registry, "correct"),
		skipCount: skipCount,
		assigned:  map[int32]bool{},
	}
	return c, nil
}

// Store returns the consumer's Redis store (for readers of the current fit).
func (c *Consumer) Store() *statestore.Store { return c.store }

func (p outputPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	if t == p.dlq {
		return kgo.StickyKeyPartitioner(nil).ForTopic(t)
	}
	return kgo.ManualPartitioner().ForTopic(t)
}

// inputs are the topics the consumer subscribes to: the engine's inputs and the run-control
// topic, whose end requests it relays onto the steps topic (docs/design-notes.md says why a replay needs no
// more than the relayed records).
func (c *Consumer) inputs() []string { return append(inputTopics(c.cfg.Names), c.cfg.Names.Runs()) }

// Run consumes until ctx is cancelled (then it finishes the current transaction and leaves the
// group) or a non-retryable error occurs (fenced by another instance with the same
// transactional id, a config change, an unreadable changelog).
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.checkTopics(ctx); err != nil {
		return err
	}
	if c.cfg.MetricsAddr != "" {
		srv, err := health.Serve(c.cfg.MetricsAddr, c.cfg.Registry, c.live, c.ready, c.log)
		if err != nil {
			return fmt.Errorf("correct: %w", err)
		}
		defer srv.Stop()
	}
	if err := c.fencePredecessor(ctx); err != nil {
		return err
	}
	// Load the snapshot script up front so the first write is not a NOSCRIPT miss.
	if err := c.store.LoadScript(ctx); err != nil {
		c.log.Warn("redis script load failed (writes will retry it)", "err", err)
	}
	c.healthy.Store(true)
	defer c.healthy.Store(false)
	c.log.Info("correction consumer started", "group", c.cfg.Group, "transactional_id", c.cfg.TransactionalID,
		"instance_id", c.cfg.InstanceID, "mode", c.cfg.Correction.Mode.String(), "map", c.cfg.Correction.Map.String(), "redis_prefix", c.cfg.RedisPrefix)
	var err error
	for {
		var reinit bool
		reinit, err = c.runSession(ctx)
		if !reinit {
			break
		}
	}
	c.logProgress("stopped")
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// sessionOpts are the options of the consume-transform-produce session.
func (c *Consumer) sessionOpts() []kgo.Opt {
	// Fetch limits first, so KafkaOpts may override them (benchmarks do). Fetched records wait
	// decompressed in the client until polled, and records of the JSON topics compress 10 to 30
	// times, so what a fetch costs is its compressed size times that: 256 KiB a partition and 4 MiB
	// a fetch (franz-go's defaults are 1 MiB and 50 MiB) keep it to tens of MiB; a batch over
	// Limits.BatchBytes is refused before it is decompressed in full (skip.go).
	opts := append([]kgo.Opt{kgo.FetchMaxPartitionBytes(fetchPartitionBytes), kgo.FetchMaxBytes(fetchBytes)}, c.cfg.KafkaOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.inputs()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(c.cfg.TransactionalID),
		kgo.TransactionTimeout(c.cfg.TxnTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MaxDecompressBatchBytes(c.cfg.Limits.BatchBytes),
		// Range assignment gives a member the same partition numbers of every input topic, which
		// is what co-partitioning by run needs (the default cooperative-sticky balancer does not).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.RecordPartitioner(outputPartitioner{dlq: c.cfg.Names.DLQ()}),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onRevoked),
		kgo.WithHooks(c.khooks...),
	)
	if c.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.InstanceID))
	}
	if c.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(c.cfg.SessionTimeout))
	}
	return opts
}

// runSession runs one transactional session until ctx ends or an error stops it. reinit asks
// for a new session: the broker fenced this producer's epoch because a transaction of ours timed
// out during an outage, while this instance still is the group's member (see reclaimable).
func (c *Consumer) runSession(ctx context.Context) (reinit bool, err error) {
	sess, err := kgo.NewGroupTransactSession(c.sessionOpts()...)
	if err != nil {
		return false, fmt.Errorf("correct: kafka session: %w", err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go c.watch(wctx, sess.Client())
	err = c.loop(ctx, sess)
	if errors.Is(err, errEpochFenced) && c.reclaimable(ctx, sess) {
		c.log.Warn("the broker fenced this instance's producer epoch after an outage (a transaction timed out); starting a new transactional session", "err", err)
		// A static member's Close keeps its membership, so the new session takes the same
		// partitions back without a rebalance; a dynamic member rejoins.
		sess.Close()
		c.resetAssigned()
		c.m.reinits.Inc()
		return true, nil
	}
	// Close leaves the group so a successor gets the partitions without waiting for the
	// session timeout; buffered inputs of unsealed steps are simply re-read by it. A static
	// member's leave is a no-op in franz-go, so a deliberate stop (not a fenced one) leaves by
	// instance id explicitly.
	if c.cfg.InstanceID != "" && errors.Is(err, context.Canceled) {
		lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if lerr := sess.Client().LeaveGroupContext(lctx); lerr != nil {
			c.log.Warn("leave group", "err", lerr)
		}
		stage.LeaveStatic(lctx, sess.Client(), c.cfg.Group, c.cfg.InstanceID, c.log)
		cancel()
	}
	sess.Close()
	return false, err
}

// Fetch limits of the session (sessionOpts).
const (
	fetchPartitionBytes = 256 << 10
	fetchBytes          = 4 << 20
)

// maxPollRecords bounds the records one poll hands over: what they cost decoded (a decoded
// manifest is about ten times its record) is per poll, so it must not scale with the backlog.
const maxPollRecords = 8192

// pollWait bounds one poll; it is also the delay before an idle consumer notices an assignment.
const pollWait = 250 * time.Millisecond

func (c *Consumer) loop(ctx context.Context, sess *kgo.GroupTransactSession) error {
	defer c.waitRedis()
	skip := c.skipper(sess.Client())
	tick := time.NewTicker(c.cfg.ProgressInterval)
	defer tick.Stop()
	var lingerFrom time.Time // when the commit was first put off for a backlog (zero: not put off)
	for {
		select {
		case <-tick.C:
			c.logProgress("progress")
		default:
		}
		// A bounded poll, so that an assignment is acted on (state loaded, config checked) even
		// when no input arrives.
		pctx, cancel := context.WithTimeout(ctx, pollWait)
		fs := sess.PollRecords(pctx, maxPollRecords)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return errors.New("correct: kafka client closed")
		}
		// A batch over Limits.BatchBytes stops its partition until the client is moved past it.
		refused := skip.Skip(fs)
		if err := c.fetchErrors(fs); err != nil {
			return err
		}
		if c.takeChanged() {
			if err := c.reloadRetrying(ctx); err != nil {
				return err
			}
		}
		now := time.Now()
		owned := c.owned()
		// After a reload (which forgets held dead letters), so the skip's dead letter survives.
		c.skipBatches(refused, owned)
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if owned[r.Partition] {
				batch = append(batch, r)
			}
		})
		decoded := c.decodeAll(ctx, batch)
		if ctx.Err() != nil {
			// A decode may have given up on an unreachable registry: apply none of the poll.
			return ctx.Err()
		}
		for _, d := range decoded {
			c.eng.apply(d, now)
		}
		n := len(batch)
		c.warnFlood(now)
		if c.cfg.OnRecords != nil && n > 0 {
			c.cfg.OnRecords(n)
		}
		if c.batching(sess, &lingerFrom) {
			continue
		}
		lingerFrom = time.Time{}
		if now.Sub(c.lifecycleAt) >= lifecycleEvery {
			c.lifecycleAt = now
			c.eng.expireEnded(now, c.cfg.EndedRunRetention)
			if err := c.eng.idleEnds(now, c.cfg.RunIdleTimeout); err != nil {
				return fmt.Errorf("correct: %w", err)
			}
		}
		if err := c.commitReady(ctx, sess); err != nil {
			return err
		}
		c.m.buffered.Set(float64(c.eng.bufferedSteps()))
		c.m.dlqHeld.Set(float64(c.eng.heldDeadLetters()))
	}
}

// fetchErrors logs a poll's fetch errors as an outage, except the poll's own deadline, a
// shutdown and a batch the skipper refused; a fenced instance id ends the loop.
func (c *Consumer) fetchErrors(fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) || oversize.Refused(fe.Err) {
			continue
		}
		if errors.Is(fe.Err, kerr.FencedInstanceID) {
			return fmt.Errorf("correct: fenced: another instance runs with --instance-id %q (give every instance its own id): %w",
				c.cfg.InstanceID, fe.Err)
		}
		c.logOutage("fetch error", fe.Err, "topic", fe.Topic, "partition", fe.Partition)
	}
	return nil
}

// reloadRetrying reloads the owned partitions' state, retrying with backoff while the cluster is
// unreachable; the records of the poll that asked for it stay in hand meanwhile (the group keeps
// heartbeating), so nothing is skipped. A reassignment during the wait is folded into the next
// attempt. Errors a retry cannot fix (changed config, unreadable changelog) are returned.
func (c *Consumer) reloadRetrying(ctx context.Context) error {
	c.outage.setLoaded(false)
	c.m.forgetStreams()
	tries, err := retry.Forever(ctx, outageBackoff.New(), func() error {
		c.takeChanged()
		err := c.reload(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case errors.Is(err, ErrConfigChanged) || !transient(err):
			return retry.Permanent(err)
		}
		c.outage.set(err)
		return err
	}, func(try int, err error, d time.Duration) {
		c.logOutage("state reload failed; retrying", err, "attempt", try, "retry_in", d.Round(time.Millisecond))
	})
	if err != nil {
		return err
	}
	c.outage.setLoaded(true)
	if tries > 1 {
		c.log.Info("state reloaded after an outage", "attempts", tries)
	}
	return nil
}

// batching reports whether to put the transaction off and poll again first: only while the client
// already holds fetched records (a backlog, so the next poll returns at once), fewer than
// MaxTxnSteps steps are buffered and the first put-off was less than MaxTxnLinger ago. Live
// traffic, which leaves nothing buffered, commits every poll; a backlog is drained in fewer,
// larger transactions. Buffered steps simply stay unsealed meanwhile, so offsets stay held.
func (c *Consumer) batching(sess *kgo.GroupTransactSession, from *time.Time) bool {
	if sess.Client().BufferedFetchRecords() == 0 || c.eng.bufferedSteps() >= c.cfg.MaxTxnSteps {
		return false
	}
	now := time.Now()
	if from.IsZero() {
		*from = now
	}
	return now.Sub(*from) < c.cfg.MaxTxnLinger
}

// decodeAll decodes a poll's records on all cores (decoding is most of the consumer's CPU and
// pure), in chunks of decodeChunk; they are applied to the engine afterwards in input order, so
// results do not change.
func (c *Consumer) decodeAll(ctx context.Context, recs []*kgo.Record) []decoded {
	out := make([]decoded, len(recs))
	_ = ordered((len(recs)+decodeChunk-1)/decodeChunk, func(_, i int) error {
		for j := i * decodeChunk; j < min((i+1)*decodeChunk, len(recs)); j++ {
			out[j] = c.eng.decode(ctx, recs[j])
		}
		return nil
	}, nil)
	return out
}

// decodeChunk is how many records one goroutine decodes at a time: enough that starting it is
// negligible, few enough that a typical poll spreads over the cores.
const decodeChunk = 64

func (c *Consumer) logProgress(msg string) {
	s := c.stats
	args := []any{"steps_sealed", s.steps, "rows", s.rows, "transactions", s.txns, "aborted", s.aborts,
		"dead_letters", s.dlq, "dead_letters_held", c.eng.heldDeadLetters(), "buffered_steps", c.eng.bufferedSteps(), "redis_roundtrips", c.m.trips.Load()}
	if st := c.eng.stalled(); len(st) > 0 && len(st) <= 8 {
		args = append(args, "waiting", st)
	}
	c.log.Info(msg, args...)
}

// live is the /healthz check: the consume loop is running.
func (c *Consumer) live() error {
	if !c.healthy.Load() {
		return errors.New("not running")
	}
	return nil
}
