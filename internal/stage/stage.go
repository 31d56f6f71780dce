// Package stage is the runtime every consuming stage shares: a franz-go consumer group whose
// records are handled concurrently, outputs produced before the input is committed
// (at-least-once; the correction consumer dedupes by rollout id), bad input to the dead-letter
// topic, Prometheus metrics, health, and graceful shutdown that hands back unfinished work.
package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// Handler turns one input record into the records to produce for it. A non-nil error marks the
// input as bad: the record goes to the dead-letter topic with the error as its reason and the
// stage moves on, unless it is a FailedError (see Failed): then the outputs, which record the
// failure, are produced and the input counts as failed. A handler interrupted by shutdown
// returns the context's error and the record is handed back uncommitted.
type Handler func(ctx context.Context, rec *kgo.Record) ([]*kgo.Record, error)

// Config configures a stage. Name, Topics and KafkaOpts are required.
type Config struct {
	// Name is the stage's name: the default group "wmrl-<name>", a metrics label and the DLQ
	// stage header.
	Name   string
	Group  string
	Topics []string
	Names  topics.Names
	// KafkaOpts carries connection options (seeds, SASL, TLS); the stage adds group options.
	KafkaOpts []kgo.Opt
	// Concurrency bounds the handlers running at once (default 1).
	Concurrency int
	// MetricsAddr serves /metrics and /healthz when non-empty (e.g. ":9464").
	MetricsAddr string
	// Registry collects metrics; a fresh one is made when nil. Sharing one lets an in-process
	// pipeline expose every stage on one endpoint.
	Registry       *prometheus.Registry
	Logger         *slog.Logger
	CommitInterval time.Duration // default 1s
	ShutdownGrace  time.Duration // how long in-flight handlers may finish on shutdown, default 30s
	// InstanceID makes the member static (KIP-345): a restarted instance with the same id gets
	// its partitions back at once, without a rebalance. Two live instances with one id fence
	// each other; the fenced one exits.
	InstanceID string
	// SessionTimeout is how long the group waits for a silent member before reassigning its
	// partitions (0: franz-go's default, 45s). With InstanceID it bounds the pause after a crash
	// whose instance does not come back.
	SessionTimeout time.Duration
	// StartupTimeout bounds Run's check that the topics exist (default 30s), so a stage started
	// before `wmrl topics create` fails within its operator's start-up deadline.
	StartupTimeout time.Duration
	// MaxFailureShare is the share of failed results (see Failed) among the last FailureWindow
	// above which /healthz/scoring fails (0: 0.5; above 1: never).
	MaxFailureShare float64
	FailureWindow   int // 0: 100
	// StallAfter is how long handlers may be running with none returning before the stage warns
	// and /healthz/scoring fails (0: never; see health.FailuresConfig.StallAfter).
	StallAfter time.Duration
	// MaxBatchBytes is the decompressed size above which a record batch is refused unread,
	// dead-lettered by reference and skipped (0: topics.MaxBatchBytes(topics.MaxRecordBytes), the
	// stages' inputs being JSON records).
	MaxBatchBytes int
	// Started, if set, is called once the start-up checks passed, before the first poll: what a
	// stage logs about how it will run belongs there, so a failed start stays one line.
	Started func()
}

// Stage runs one Handler over a consumer group.
type Stage struct {
	cfg     Config
	handler Handler
	log     *slog.Logger
	cl      *kgo.Client
	track   *tracker
	dlq     *topics.DeadLetterWriter
	skip    *oversize.Skipper
	metrics *metrics
	// failures is the window of scoring outcomes behind /healthz/scoring.
	failures *health.Failures
	healthy  atomic.Bool
	ready    readiness
	fatal    chan error
	// produceCtx bounds output produces; Run cancels it when the shutdown grace ends.
	produceCtx context.Context
	wg         sync.WaitGroup
}

// New connects the stage's client; Run starts consuming.
func New(cfg Config, h Handler) (*Stage, error) {
	if cfg.Name == "" || len(cfg.Topics) == 0 || h == nil {
		return nil, errors.New("stage: Name, Topics and a handler are required")
	}
	cfg.Group = cmp.Or(cfg.Group, "wmrl-"+cfg.Name)
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Stage{
		cfg:     cfg,
		handler: h,
		log:     cfg.Logger.With("stage", cfg.Name),
		track:   newTracker(),
		dlq:     topics.NewDeadLetterWriter(cfg.Names, cfg.Name),
		fatal:   make(chan error, 1),
	}
	var err error
	if s.metrics, err = newMetrics(cfg.Registry, cfg.Name); err != nil {
		return nil, err
	}
	s.failures = s.newFailures()
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = topics.MaxBatchBytes(topics.MaxRecordBytes)
		s.cfg.MaxBatchBytes = cfg.MaxBatchBytes
	}
	opts := append([]kgo.Opt{}, cfg.KafkaOpts...)
	opts = append(opts,
		kgo.MaxDecompressBatchBytes(cfg.MaxBatchBytes),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordDeliveryTimeout(2*time.Minute),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			s.log.Info("partitions assigned", "partitions", a)
			s.track.assign(a)
			s.ready.assigned(a)
		}),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			s.log.Warn("partitions lost; their uncommitted work will be redone by the new owner", "partitions", lost)
			s.track.revoke(lost)
			s.ready.revoked(lost)
		}),
		kgo.WithHooks(KafkaMetrics(cfg.Registry, cfg.Name)...),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	if s.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("stage %s: kafka client: %w", cfg.Name, err)
	}
	s.skip = oversize.NewSkipper(s.cl, s.log, s.metrics.batchesSkipped, "dead-lettered by reference").WithSizeProbe(cfg.KafkaOpts)
	return s, nil
}

// Client exposes the stage's client, e.g. for producing side records from a handler.
func (s *Stage) Client() *kgo.Client { return s.cl }

// Run consumes until ctx is cancelled or a produce fails for good, then shuts down gracefully:
// in-flight handlers get ShutdownGrace to finish, the rest are handed back, finished offsets
// are committed and the group is left.
func (s *Stage) Run(ctx context.Context) error {
	defer s.cl.Close()
	if s.cfg.MetricsAddr != "" {
		srv, err := health.Serve(s.cfg.MetricsAddr, s.cfg.Registry, s.live, s.Ready, s.log,
			health.Endpoint{Path: health.ScoringPath, Check: s.ScoringCheck})
		if err != nil {
			return err
		}
		defer srv.Stop()
	}
	if err := s.requireTopics(ctx); err != nil {
		return err
	}
	if s.cfg.Started != nil {
		s.cfg.Started()
	}
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	// Outputs are produced under their own context so shutdown does not abort a record half
	// way; it is cancelled when the grace period ends, so an unreachable broker cannot hold
	// shutdown for the whole record delivery timeout. Unacknowledged records are handed back.
	pctx, cancelProduce := context.WithCancel(context.Background())
	defer cancelProduce()
	s.produceCtx = pctx
	commitDone := make(chan struct{})
	commitCtx, stopCommits := context.WithCancel(context.Background())
	go func() {
		defer close(commitDone)
		s.commitLoop(commitCtx)
	}()
	sem := make(chan struct{}, s.cfg.Concurrency)
	s.healthy.Store(true)
	stopWatchers := s.startWatchers()
	defer stopWatchers()
	// "handlers" is the runtime's bound; a stage's own work bound (the world model's scoring
	// requests, the sandbox's slots) is logged by the stage, so neither reads as the other.
	s.log.Info("stage running", "group", s.cfg.Group, "topics", s.cfg.Topics, "handlers", s.cfg.Concurrency)

	runErr := s.poll(ctx, hctx, sem)
	s.healthy.Store(false)
	s.log.Info("stopping: waiting for in-flight records", "inflight", len(sem), "grace", s.cfg.ShutdownGrace)
	timer := time.AfterFunc(s.cfg.ShutdownGrace, func() {
		cancelHandlers()
		cancelProduce()
	})
	s.waitHandlers(s.cfg.ShutdownGrace + produceAckGrace)
	timer.Stop()
	stopCommits()
	<-commitDone
	return s.leave(runErr)
}

// startWatchers starts the cluster watch (pings, consumer lag) and the failure watch; the returned
// function stops both and waits for them.
func (s *Stage) startWatchers() (stop func()) {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		s.watch(watchCtx)
	}()
	failDone := make(chan struct{})
	go func() {
		defer close(failDone)
		s.failures.Watch(watchCtx)
	}()
	return func() {
		stopWatch()
		<-watchDone
		<-failDone
	}
}

// leave ends a stopped stage's membership: it commits the finished offsets and leaves the
// group (and its static membership, unless runErr is that membership's fencing). It returns
// runErr, or else a fatal error recorded while the stage ran.
func (s *Stage) leave(runErr error) error {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.commit(cctx, nil); err != nil {
		s.log.Error("final commit failed", "err", err)
	}
	if err := s.cl.LeaveGroupContext(cctx); err != nil {
		s.log.Warn("leave group", "err", err)
	}
	if s.cfg.InstanceID != "" && !errors.Is(runErr, kerr.FencedInstanceID) {
		s.leaveStatic(cctx)
	}
	s.log.Info("stopped")
	if runErr == nil {
		select {
		case runErr = <-s.fatal:
		default:
		}
	}
	return runErr
}

// requireTopics checks the input topics' layout: a missing input topic would otherwise mean
// polling for ever without a word.
func (s *Stage) requireTopics(ctx context.Context) error {
	check := s.cfg.StartupTimeout
	if check <= 0 {
		check = startupTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, check)
	defer cancel()
	if err := topicadmin.RequireLayout(tctx, kadm.NewClient(s.cl), s.cfg.Names, s.cfg.Topics); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Name, err)
	}
	return nil
}

// poll hands fetched records to handlers (under hctx), at most cap(sem) at a time, until ctx is
// cancelled or the client closed (nil), or the instance is fenced or a handler reported a fatal
// error (that error).
func (s *Stage) poll(ctx, hctx context.Context, sem chan struct{}) error {
	for {
		fetches := s.cl.PollRecords(ctx, 4*s.cfg.Concurrency)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		select {
		case err := <-s.fatal:
			return err
		default:
		}
		for _, ref := range s.skip.Skip(fetches) {
			s.deadLetterBatch(ref)
		}
		var fenced error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, kerr.FencedInstanceID) {
				fenced = err
				return
			}
			if oversize.Refused(err) {
				return // skipped above
			}
			s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		if fenced != nil {
			return fmt.Errorf("stage %s: fenced: another instance runs with --instance-id %q (give every instance its own id): %w",
				s.cfg.Name, s.cfg.InstanceID, fenced)
		}
		var (
			stop   bool
			runErr error
		)
		fetches.EachRecord(func(r *kgo.Record) {
			if stop {
				return
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				stop = true
				return
			case runErr = <-s.fatal:
				stop = true
				return
			}
			if !s.track.start(r.Topic, r.Partition, r.Offset, r.LeaderEpoch) {
				<-sem
				return
			}
			s.metrics.inflight.Inc()
			s.wg.Add(1)
			go s.handle(hctx, r, func() { <-sem })
		})
		if stop {
			return runErr
		}
	}
}

// startupTimeout is the default of Config.StartupTimeout.
const startupTimeout = 30 * time.Second

// produceAckGrace is how long shutdown still waits, after the grace period, for acknowledgements
// of produce requests already on the wire; franz-go cannot cancel those.
const produceAckGrace = 5 * time.Second

// waitHandlers waits for every dispatched record to finish, at most d. Records still
// unacknowledged then stay uncommitted (the commit point stays below them) and are redone by
// the next owner; closing the client fails them.
func (s *Stage) waitHandlers(d time.Duration) {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		s.log.Warn("shutdown: giving up on unacknowledged outputs; their inputs stay uncommitted", "waited", d)
	}
}

// handle runs the handler for one record and produces its outputs, or its dead letter. The
// handler's concurrency slot is released as soon as the handler returns, so waiting for produce
// acknowledgements never idles a slot; the record counts as finished only once every output is
// acknowledged.
func (s *Stage) handle(ctx context.Context, r *kgo.Record, release func()) {
	start := time.Now()
	s.failures.Begin()
	outs, err := s.handler(ctx, r)
	s.failures.End()
	release()
	done := func(result string) {
		s.metrics.records.WithLabelValues(result).Inc()
		s.metrics.inflight.Dec()
		s.wg.Done()
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		s.track.handBack(r.Topic, r.Partition, r.Offset)
		done("handed_back")
		return
	}
	outs, result, err := s.outcome(outs, err)
	if err != nil {
		s.logDeadLetter(r, err)
		s.produceDeadLetter(r, err, 0, start, done)
		return
	}
	if len(outs) == 0 {
		s.track.finish(r.Topic, r.Partition, r.Offset)
		s.metrics.latency.Observe(time.Since(start).Seconds())
		done(result)
		return
	}
	s.produce(r, outs, start, done, func(perr error) bool {
		if perr == nil {
			done(result)
			return true
		}
		if !Undeliverable(perr) {
			return false
		}
		// Not from within the promise: Produce may block on a full buffer.
		err := outputRefused{perr}
		s.logDeadLetter(r, err)
		go s.produceDeadLetter(r, err, 0, start, done)
		return true
	})
}

// logDeadLetter logs and counts a bad input.
func (s *Stage) logDeadLetter(r *kgo.Record, err error) {
	reason := topics.Reason(err)
	s.log.Warn("bad record to dead-letter topic", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "err", err)
	s.metrics.deadLetters.WithLabelValues(reason).Inc()
}

// smallDeadLetter is the size up to which a refused dead letter is first sent again as it is:
// the broker refuses a whole batch when it is too large, so a small dead letter batched with a
// large one fails with it without being at fault.
const smallDeadLetter = 16 << 10

// produceDeadLetter produces r's dead letter. When Kafka refuses it for good (Undeliverable) it
// tries again (attempt 1): as it is when small, else without value and source headers
// (DeadLetterWriter.Minimal); then minimal (attempt 2); a minimal dead letter refused too skips r
// with an error log and wmrl_stage_dead_letters_undeliverable_total. Either way the stage moves
// on: a poison record never stops it, and a restart never meets it again.
func (s *Stage) produceDeadLetter(r *kgo.Record, err error, attempt int, start time.Time, done func(string)) {
	var dl *kgo.Record
	if attempt < 2 {
		dl = s.dlq.Record(r, err)
	}
	if attempt >= 2 || attempt == 1 && RecordBytes(dl) > smallDeadLetter {
		dl = s.dlq.Minimal().Record(r, err)
		attempt = max(attempt, 2)
	}
	s.produce(r, []*kgo.Record{dl}, start, done, func(perr error) bool {
		switch {
		case perr == nil:
			done("dead_letter")
		case !Undeliverable(perr):
			return false
		case attempt < 2:
			s.log.Warn("dead letter refused by Kafka; sending it again, smaller if it is large",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempt", attempt+1, "err", perr)
			go s.produceDeadLetter(r, err, attempt+1, start, done)
		default:
			s.log.Error("dead letter refused by Kafka even without value and headers; the input record is skipped without one",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", perr)
			s.metrics.undeliverable.Inc()
			s.track.finish(r.Topic, r.Partition, r.Offset)
			done("skipped")
		}
		return true
	})
}

// deadLetterBatch dead-letters a refused batch by reference (topics.DeadLetterWriter.BatchRecord).
// The batch is tracked as one record at its last offset, so the commit point passes it only once
// the dead letter is acknowledged: a crash before that meets the batch again and dead-letters it
// again, at least once like every other dead letter.
func (s *Stage) deadLetterBatch(ref topics.BatchRef) {
	last := &kgo.Record{Topic: ref.Topic, Partition: ref.Partition, Offset: ref.NextOffset - 1}
	if !s.track.start(last.Topic, last.Partition, last.Offset, ref.Epoch) {
		return // revoked meanwhile: the new owner meets the batch
	}
	s.metrics.deadLetters.WithLabelValues(topics.ReasonBatchTooLarge).Inc()
	s.metrics.inflight.Inc()
	s.wg.Add(1)
	go s.produceBatchDeadLetter(ref, last)
}

// produceBatchDeadLetter learns the batch's compressed size (one small fetch; off the poll loop)
// and produces its dead letter; see deadLetterBatch.
func (s *Stage) produceBatchDeadLetter(ref topics.BatchRef, last *kgo.Record) {
	done := func(string) {
		s.metrics.inflight.Dec()
		s.wg.Done()
	}
	sctx, cancel := context.WithTimeout(s.produceCtx, 5*time.Second)
	ref.CompressedBytes = s.skip.BatchBytes(sctx, ref)
	cancel()
	s.produce(last, []*kgo.Record{s.dlq.BatchRecord(ref)}, time.Now(), done, func(perr error) bool {
		switch {
		case perr == nil:
			done("dead_letter")
		case Undeliverable(perr):
			s.log.Error("batch dead letter refused by Kafka; the batch is skipped without one",
				"topic", ref.Topic, "partition", ref.Partition, "first_offset", ref.Offset, "next_offset", ref.NextOffset, "err", perr)
			s.metrics.undeliverable.Inc()
			s.track.finish(last.Topic, last.Partition, last.Offset)
			done("skipped")
		default:
			return false
		}
		return true
	})
}

// RecordBytes is a record's size as counted against byte limits: key, value and headers (Kafka's
// framing overhead left out).
func RecordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// ErrOutputRefused marks an input whose outputs Kafka refused for good (stage.Undeliverable, e.g.
// an output over the topic's max.message.bytes); the input is dead-lettered with reason
// "output-refused" instead of stopping the stage on it again after every restart.
var ErrOutputRefused = errors.New("outputs refused by Kafka")

type outputRefused struct{ err error }

func (e outputRefused) Error() string     { return fmt.Sprintf("%v: %v", ErrOutputRefused, e.err) }
func (e outputRefused) Unwrap() []error   { return []error{ErrOutputRefused, e.err} }
func (e outputRefused) DLQReason() string { return "output-refused" }

// produce produces outs for input r and, once every one is acknowledged, calls settle with the
// first error (nil: all delivered). On success r is finished before settle; settle returns
// whether it took care of a failure. A failure it leaves hands r back, ends it with done and
// stops the stage (or, after the shutdown grace, only hands it back).
func (s *Stage) produce(r *kgo.Record, outs []*kgo.Record, start time.Time, done func(string), settle func(error) bool) {
	var (
		pending  atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	pending.Store(int64(len(outs)))
	acked := func(_ *kgo.Record, perr error) {
		if perr != nil {
			errOnce.Do(func() { firstErr = perr })
		}
		if pending.Add(-1) != 0 {
			return
		}
		if firstErr == nil {
			s.metrics.produced.Add(float64(len(outs)))
			s.metrics.latency.Observe(time.Since(start).Seconds())
			s.track.finish(r.Topic, r.Partition, r.Offset)
			settle(nil)
			return
		}
		if s.produceCtx.Err() == nil && settle(firstErr) {
			return
		}
		s.track.handBack(r.Topic, r.Partition, r.Offset)
		result := "handed_back" // shutdown grace ended before the broker acknowledged
		if s.produceCtx.Err() == nil {
			select {
			case s.fatal <- fmt.Errorf("stage %s: produce outputs of %s/%d@%d: %w", s.cfg.Name, r.Topic, r.Partition, r.Offset, firstErr):
			default:
			}
			result = "produce_failed"
		}
		done(result)
	}
	for _, o := range outs {
		s.cl.Produce(s.produceCtx, o, acked)
	}
}

// live is the /healthz check: the consume loop is running.
func (s *Stage) live() error {
	if !s.healthy.Load() {
		return errors.New("not running")
	}
	return nil
}
