package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// Consumer is the stateful, exactly-once correction stage.
type Consumer struct {
	cfg   Config
	log   *slog.Logger
	corr  *correction.Corrector
	m     *metrics
	store *Store
	eng   *engine
	kprom *kprom.Metrics

	mu       sync.Mutex
	assigned map[int32]bool // partition numbers of the input topics we own
	changed  bool           // assignment changed since the last reload

	healthy atomic.Bool
	stats   progress
	// redisDone is closed when the Redis write in flight finishes (nil: none); loop only.
	redisDone chan struct{}
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
	cfg.Redis.AddHook(tripHook{m})
	c := &Consumer{
		cfg:      cfg,
		log:      cfg.Logger.With("stage", "correct"),
		corr:     corr,
		m:        m,
		store:    NewStore(cfg.Redis, cfg.RedisPrefix, cfg.KeepStates),
		eng:      newEngine(corr, cfg.Names, m),
		kprom:    kprom.NewMetrics("wmrl_kafka", kprom.Registry(cfg.Registry), kprom.WithStaticLabel(prometheus.Labels{"stage": "correct"})),
		assigned: map[int32]bool{},
	}
	return c, nil
}

// RedisRoundTrips is the number of Redis round trips so far (the benchmark reports it per step).
func (c *Consumer) RedisRoundTrips() int64 { return c.m.trips.Load() }

// Store returns the consumer's Redis store (for readers of the current fit).
func (c *Consumer) Store() *Store { return c.store }

// outputPartitioner sends advantages and calibration snapshots to the partition number of the
// run's inputs (Record.Partition, set by the consumer) so the calibration partition read on
// assignment holds exactly the runs of that input partition; dead letters hash by key.
type outputPartitioner struct{ dlq string }

func (p outputPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	if t == p.dlq {
		return kgo.StickyKeyPartitioner(nil).ForTopic(t)
	}
	return kgo.ManualPartitioner().ForTopic(t)
}

func (c *Consumer) inputs() []string {
	n := c.cfg.Names
	return []string{n.Steps(), n.Predicted(), n.Executed()}
}

// Run consumes until ctx is cancelled (then it finishes the current transaction and leaves the
// group) or a non-retryable error occurs (fenced by another instance with the same
// transactional id, a config change, an unreadable changelog).
func (c *Consumer) Run(ctx context.Context) error {
	if c.cfg.MetricsAddr != "" {
		stop, err := c.serveHTTP()
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := c.checkTopics(ctx); err != nil {
		return err
	}
	if err := c.fencePredecessor(ctx); err != nil {
		return err
	}
	// Load the snapshot script up front so the first write is not a NOSCRIPT miss.
	if err := writeScript.Load(ctx, c.cfg.Redis).Err(); err != nil {
		c.log.Warn("redis script load failed (writes will retry it)", "err", err)
	}
	opts := append(append([]kgo.Opt(nil), c.cfg.KafkaOpts...),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.inputs()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(c.cfg.TransactionalID),
		kgo.TransactionTimeout(c.cfg.TxnTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Range assignment gives a member the same partition numbers of every input topic, which
		// is what co-partitioning by run needs (the default cooperative-sticky balancer does not).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.RecordPartitioner(outputPartitioner{dlq: c.cfg.Names.DLQ()}),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onRevoked),
		kgo.WithHooks(c.kprom),
	)
	if c.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.InstanceID))
	}
	if c.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(c.cfg.SessionTimeout))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("correct: kafka session: %w", err)
	}
	c.healthy.Store(true)
	defer c.healthy.Store(false)
	c.log.Info("correction consumer started", "group", c.cfg.Group, "transactional_id", c.cfg.TransactionalID,
		"mode", c.cfg.Correction.Mode.String(), "redis_prefix", c.cfg.RedisPrefix)
	err = c.loop(ctx, sess)
	// Close leaves the group so a successor gets the partitions without waiting for the
	// session timeout; buffered inputs of unsealed steps are simply re-read by it.
	sess.Close()
	c.logProgress("stopped")
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// pollWait bounds one poll; it is also the delay before an idle consumer notices an assignment.
const pollWait = 250 * time.Millisecond

func (c *Consumer) loop(ctx context.Context, sess *kgo.GroupTransactSession) error {
	defer c.waitRedis()
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
		fs := sess.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return errors.New("correct: kafka client closed")
		}
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			c.log.Warn("fetch error", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
		}
		if c.takeChanged() {
			if err := c.reload(ctx); err != nil {
				return err
			}
		}
		now := time.Now()
		owned := c.owned()
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if owned[r.Partition] {
				batch = append(batch, r)
			}
		})
		for _, d := range c.decodeAll(batch) {
			c.eng.apply(d, now)
		}
		n := len(batch)
		if c.cfg.OnRecords != nil && n > 0 {
			c.cfg.OnRecords(n)
		}
		if c.batching(sess, &lingerFrom) {
			continue
		}
		lingerFrom = time.Time{}
		if err := c.commitReady(sess); err != nil {
			return err
		}
		c.m.buffered.Set(float64(c.eng.bufferedSteps()))
	}
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
// pure); they are applied to the engine afterwards in input order, so results do not change.
func (c *Consumer) decodeAll(recs []*kgo.Record) []decoded {
	out := make([]decoded, len(recs))
	workers := min(runtime.GOMAXPROCS(0), len(recs)/64)
	if workers < 2 {
		for i, r := range recs {
			out[i] = c.eng.decode(r)
		}
		return out
	}
	var wg sync.WaitGroup
	per := (len(recs) + workers - 1) / workers
	for lo := 0; lo < len(recs); lo += per {
		hi := min(lo+per, len(recs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				out[i] = c.eng.decode(recs[i])
			}
		}()
	}
	wg.Wait()
	return out
}

// commitReady seals complete steps and, if there is anything to write, runs one transaction.
// The transaction begins before the outputs are encoded, so that the broker already writes the
// first steps' records while later ones are being encoded; Redis is written after the commit on
// a goroutine of its own (see writeRedisAsync).
func (c *Consumer) commitReady(sess *kgo.GroupTransactSession) error {
	done, err := c.eng.sealReady()
	if err != nil {
		return fmt.Errorf("correct: %w", err)
	}
	hold := c.eng.holdback()
	dlq := c.eng.takeDeadLetters(hold)
	if len(done) == 0 && len(dlq) == 0 {
		return nil
	}

	// The transaction runs on its own context: a shutdown signal must not cut it in half.
	tctx, cancel := context.WithTimeout(context.Background(), c.cfg.TxnTimeout+10*time.Second)
	defer cancel()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("correct: begin transaction: %w", err)
	}
	var perr error
	var pmu sync.Mutex
	produce := func(r *kgo.Record) {
		sess.Produce(tctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				pmu.Lock()
				if perr == nil {
					perr = fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, err)
				}
				pmu.Unlock()
			}
		})
	}
	snaps, err := c.produceOutputs(done, produce)
	if err != nil {
		// Nothing of this transaction may become visible; the consumer stops with err.
		if _, aerr := sess.End(tctx, kgo.TryAbort); aerr != nil {
			c.log.Error("abort after an encoding failure failed", "err", aerr)
		}
		return err
	}
	for _, r := range dlq {
		produce(r)
	}
	if err := sess.Client().Flush(tctx); err != nil {
		return fmt.Errorf("correct: flush: %w", err)
	}
	pmu.Lock()
	ferr := perr
	pmu.Unlock()
	try := kgo.TryCommit
	if ferr != nil {
		c.log.Error("produce failed, aborting transaction", "err", ferr)
		try = kgo.TryAbort
	}
	// Commit input offsets only up to the oldest record still buffered for an unsealed step:
	// End would otherwise commit everything polled, and a crash would lose those inputs.
	ectx := kgo.PreTxnCommitFnContext(tctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		holdOffsets(req, hold)
		return nil
	})
	committed, err := sess.End(ectx, try)
	if err != nil || !committed {
		c.m.txns.WithLabelValues("aborted").Inc()
		c.stats.aborts++
		if err != nil && isFatalTxnErr(err) {
			return fmt.Errorf("correct: transaction: %w", err)
		}
		c.log.Warn("transaction aborted; rebuilding state from the changelog", "err", err, "produce_err", ferr)
		// The session rewound the consumer to the committed offsets; the sealed steps of this
		// transaction are undone by reloading every owned partition's state.
		c.markChanged()
		return nil
	}
	c.m.txns.WithLabelValues("committed").Inc()
	c.stats.txns++
	c.stats.dlq += int64(len(dlq))
	for _, r := range dlq {
		reason, _ := topics.HeaderValue(r.Headers, topics.HeaderDLQReason)
		c.m.deadLetters.WithLabelValues(reason).Inc()
	}
	c.m.sealedSteps.Add(float64(len(done)))
	var infos []SealedStep
	now := time.Now()
	for _, s := range done {
		c.m.rows.Add(float64(len(s.rows)))
		c.m.sealLatency.Observe(now.Sub(s.lastInput).Seconds())
		c.stats.steps++
		c.stats.rows += int64(len(s.rows))
		c.log.Debug("step sealed", "run", s.run, "step", s.step, "rows", len(s.rows), "streams", len(s.snaps))
		infos = append(infos, SealedStep{Run: s.run, Step: s.step, Rows: len(s.rows), LastInput: s.lastInput})
	}
	// Redis only after the commit, so it is never ahead of committed output.
	c.writeRedisAsync(snaps, done, infos)
	return nil
}

// writeRedisAsync writes the committed snapshots on a goroutine, then calls OnCommit, so the
// Redis round trip overlaps with polling and decoding the next records. At most one write is in
// flight (a new one waits for the previous, which keeps the writes in commit order), and
// waitRedis joins it before state is reloaded from Redis and before Run returns.
func (c *Consumer) writeRedisAsync(snaps []*topics.CalibrationSnapshot, done []*sealed, infos []SealedStep) {
	c.waitRedis()
	ch := make(chan struct{})
	c.redisDone = ch
	go func() {
		defer close(ch)
		c.writeRedis(snaps, done)
		if c.cfg.OnCommit != nil && len(infos) > 0 {
			c.cfg.OnCommit(infos)
		}
	}()
}

// waitRedis blocks until the Redis write in flight (if any) has finished.
func (c *Consumer) waitRedis() {
	if c.redisDone != nil {
		<-c.redisDone
		c.redisDone = nil
	}
}

// holdOffsets lowers each partition's offset in req to the holdback, never raising one.
func holdOffsets(req *kmsg.TxnOffsetCommitRequest, hold map[tp]offEpoch) {
	for i := range req.Topics {
		t := &req.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if h, ok := hold[tp{t.Topic, p.Partition}]; ok && h.off < p.Offset {
				p.Offset, p.LeaderEpoch = h.off, h.epoch
			}
		}
	}
}

func isFatalTxnErr(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.UnknownTopicID)
}

// produceOutputs builds and produces, in step order, the records of the sealed steps: per step
// its advantage chunks (key run_id, chunk i/n headers) and one calibration snapshot per stream,
// all on the run's partition. Encoding is pure and most of a transaction's CPU, so with several
// steps it runs on all cores while the records of earlier steps are already being produced.
func (c *Consumer) produceOutputs(done []*sealed, produce func(*kgo.Record)) ([]*topics.CalibrationSnapshot, error) {
	var snaps []*topics.CalibrationSnapshot
	now := time.Now().UTC()
	for _, s := range done {
		for i := range s.snaps {
			s.snaps[i].CreatedAt = now
			snaps = append(snaps, &s.snaps[i])
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(done))
	if workers < 2 {
		for _, s := range done {
			recs, err := c.stepRecords(s)
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				produce(r)
			}
		}
		return snaps, nil
	}
	type encoded struct {
		recs []*kgo.Record
		err  error
	}
	out := make([]encoded, len(done))
	ready := make([]chan struct{}, len(done))
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(done) || stop.Load() {
					return
				}
				out[i].recs, out[i].err = c.stepRecords(done[i])
				close(ready[i])
			}
		}()
	}
	defer wg.Wait()
	for i := range done {
		<-ready[i]
		if out[i].err != nil {
			stop.Store(true)
			return nil, out[i].err
		}
		for _, r := range out[i].recs {
			produce(r)
		}
	}
	return snaps, nil
}

// stepRecords encodes one sealed step's records (advantage chunks, then the snapshots).
func (c *Consumer) stepRecords(s *sealed) ([]*kgo.Record, error) {
	recs, err := c.cfg.Names.AdvantageRecords(s.run, "", s.step, s.rows, c.cfg.ChunkBytes)
	if err != nil {
		return nil, fmt.Errorf("correct: advantages run %s step %d: %w", s.run, s.step, err)
	}
	for _, r := range recs {
		r.Partition = s.part
	}
	for i := range s.snaps {
		sn := &s.snaps[i]
		r, err := c.cfg.Names.CalibrationRecord(*sn)
		if err != nil {
			return nil, fmt.Errorf("correct: calibration run %s stream %s step %d: %w", s.run, sn.Stream, s.step, err)
		}
		r.Partition = s.part
		recs = append(recs, r)
	}
	return recs, nil
}

// writeRedis stores the committed snapshots (one round trip). Failures only cost a rebuild
// from the changelog later; a differing digest for a stored step is an alarm.
func (c *Consumer) writeRedis(snaps []*topics.CalibrationSnapshot, done []*sealed) {
	if len(snaps) == 0 {
		return
	}
	newStreams := map[string][]string{}
	for _, s := range done {
		if len(s.newStream) > 0 {
			newStreams[s.run] = append(newStreams[s.run], s.newStream...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.store.write(ctx, snaps, newStreams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis snapshot write failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
}

func (c *Consumer) alarms(res []writeOutcome) {
	for _, o := range res {
		if o.status == 2 {
			c.m.digestAlarms.Inc()
			c.log.Error("ALARM: Redis holds a different state for an already sealed step",
				"run", o.snap.RunID, "stream", o.snap.Stream, "step", o.snap.Step,
				"digest", o.snap.Digest, "redis_digest", o.existing, "key", c.store.StateKey(o.snap.RunID, o.snap.Stream, o.snap.Step))
		}
	}
}

// reload forgets all in-memory state and rebuilds it for the owned partitions: the changelog
// says which step each (run, stream) sealed last and its digest; Redis supplies that exact state
// when it matches, the snapshot's own bytes otherwise (and Redis is repaired).
func (c *Consumer) reload(ctx context.Context) error {
	c.waitRedis()
	parts := slices.Sorted(maps.Keys(c.owned()))
	c.eng.reset()
	start := time.Now()
	got, err := readChangelog(ctx, c.cfg.KafkaOpts, c.cfg.Names.Calibration(), parts, c.cfg.ChangelogTimeout, c.log)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(got))
	want := make([]*topics.CalibrationSnapshot, len(keys))
	for i, k := range keys {
		s := got[k].snap
		want[i] = &s
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fromRedis, rerr := c.store.load(lctx, want)
	if rerr != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis state load failed; using the changelog's snapshots", "err", rerr)
	}
	byRun := map[string][]*correction.State{}
	partOf := map[string]int32{}
	var repair []*topics.CalibrationSnapshot
	rebuilt := 0
	for i, sn := range want {
		var l loaded
		if fromRedis != nil {
			l = fromRedis[i]
		}
		reason := redisVerdict(sn, l)
		enc := l.state
		if reason != "" {
			enc = sn.State
			c.m.rebuilds.WithLabelValues(reason).Inc()
			rebuilt++
			repair = append(repair, sn)
			c.log.Info("state rebuilt from the changelog", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step, "reason", reason)
		}
		if sum := sha256.Sum256(enc); hex.EncodeToString(sum[:]) != sn.Digest {
			return fmt.Errorf("%w: snapshot %s/%s step %d: state bytes do not match its digest", ErrChangelog, sn.RunID, sn.Stream, sn.Step)
		}
		st, err := correction.DecodeState(enc)
		if err != nil {
			return fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
		}
		if st.Run() != sn.RunID || st.Stream() != sn.Stream || st.SealedStep() != sn.Step {
			return fmt.Errorf("%w: snapshot %s/%s step %d holds state of %s/%s step %d", ErrChangelog,
				sn.RunID, sn.Stream, sn.Step, st.Run(), st.Stream(), st.SealedStep())
		}
		if sn.ConfigHash != c.eng.hash {
			if !c.cfg.AllowConfigChange {
				return fmt.Errorf("%w: run %s stream %s (stored %s, running %s); restart with the original settings, or pass --allow-config-change to restart its calibration",
					ErrConfigChanged, sn.RunID, sn.Stream, short(sn.ConfigHash), short(c.eng.hash))
			}
			c.log.Warn("correction config changed: calibration of the stream restarts from an empty window", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step)
			st = c.corr.NewState(sn.RunID, sn.Stream)
			for v := int64(0); v <= sn.Step; v++ {
				if _, err := c.corr.Advance(st, correction.Step{Run: sn.RunID, Stream: sn.Stream, Step: v}, nil); err != nil {
					return fmt.Errorf("correct: restart calibration of %s/%s: %w", sn.RunID, sn.Stream, err)
				}
			}
		}
		byRun[sn.RunID] = append(byRun[sn.RunID], st)
		partOf[sn.RunID] = got[keys[i]].part
	}
	for run, states := range byRun {
		if err := c.eng.install(run, partOf[run], states); err != nil {
			return err
		}
	}
	if len(repair) > 0 {
		res, err := c.store.writeForce(lctx, repair)
		if err != nil {
			c.m.redisErrors.Inc()
			c.log.Warn("redis repair failed", "err", err)
		} else {
			c.alarms(res)
		}
	}
	c.log.Info("state loaded", "partitions", parts, "streams", len(want), "runs", len(byRun), "rebuilt_from_changelog", rebuilt, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// redisVerdict says why Redis cannot supply sn's state ("" when it can).
func redisVerdict(sn *topics.CalibrationSnapshot, l loaded) string {
	switch {
	case l.head == nil && !l.has:
		return "missing"
	case l.head != nil && l.head.SealedStep < sn.Step:
		return "behind"
	case l.head != nil && l.head.SealedStep > sn.Step:
		return "ahead"
	case !l.has:
		return "missing"
	}
	sum := sha256.Sum256(l.state)
	if hex.EncodeToString(sum[:]) != sn.Digest {
		return "mismatch"
	}
	return ""
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, as map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.inputs() {
		for _, p := range as[t] {
			c.assigned[p] = true
		}
	}
	c.changed = true
	c.log.Info("partitions assigned", "partitions", as)
}

func (c *Consumer) onRevoked(_ context.Context, _ *kgo.Client, rs map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.inputs() {
		for _, p := range rs[t] {
			delete(c.assigned, p)
		}
	}
	c.changed = true
	c.log.Info("partitions revoked", "partitions", rs)
}

func (c *Consumer) owned() map[int32]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.assigned)
}

func (c *Consumer) takeChanged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.changed
	c.changed = false
	return ch
}

func (c *Consumer) markChanged() {
	c.mu.Lock()
	c.changed = true
	c.mu.Unlock()
}

// checkTopics verifies that the co-partitioned topics exist with one partition count.
func (c *Consumer) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(c.cfg.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("correct: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := c.cfg.Names
	want := []string{n.Steps(), n.Predicted(), n.Executed(), n.Advantages(), n.Calibration()}
	td, err := kadm.NewClient(cl).ListTopics(ctx, append(want, n.DLQ())...)
	if err != nil {
		return fmt.Errorf("correct: list topics: %w", err)
	}
	counts := map[string]int{}
	for _, t := range append(want, n.DLQ()) {
		d, ok := td[t]
		if !ok || d.Err != nil {
			return fmt.Errorf("correct: topic %s is missing (run `wmrl topics create`)", t)
		}
		counts[t] = len(d.Partitions)
	}
	for _, t := range want[1:] {
		if counts[t] != counts[want[0]] {
			return fmt.Errorf("correct: topic %s has %d partitions, %s has %d: co-partitioned topics need one partition count", t, counts[t], want[0], counts[want[0]])
		}
	}
	return nil
}

// fencePredecessor bumps the producer epoch of the transactional id before joining the group.
// The broker then aborts a crashed predecessor's open transaction at once; without it the
// group's stable offset fetch would wait for that transaction to time out.
func (c *Consumer) fencePredecessor(ctx context.Context) error {
	cl, err := kgo.NewClient(c.cfg.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("correct: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrInitProducerIDRequest()
	id := c.cfg.TransactionalID
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = int32(c.cfg.TxnTimeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return nil
		}
		if !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions) {
			return fmt.Errorf("correct: init producer id for %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("correct: init producer id for %s: %w", id, errors.Join(ctx.Err(), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Consumer) logProgress(msg string) {
	s := c.stats
	args := []any{"steps_sealed", s.steps, "rows", s.rows, "transactions", s.txns, "aborted", s.aborts,
		"dead_letters", s.dlq, "buffered_steps", c.eng.bufferedSteps(), "redis_roundtrips", c.m.trips.Load()}
	if st := c.eng.stalled(); len(st) > 0 && len(st) <= 8 {
		args = append(args, "waiting", st)
	}
	c.log.Info(msg, args...)
}

func (c *Consumer) serveHTTP() (func(), error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.healthy.Load() {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", c.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("correct: metrics listener %s: %w", c.cfg.MetricsAddr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	c.log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
