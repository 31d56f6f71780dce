package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/topics"
)

// DefaultGroup is the consumer group of a Stream whose Config.Group is empty.
const DefaultGroup = "wmrl-trainer"

// closeCommitTimeout bounds the final commit of acknowledged steps in Close.
const closeCommitTimeout = 5 * time.Second

// Config configures a Stream.
type Config struct {
	// KafkaOpts carries the connection options (seeds, SASL, TLS; see internal/conn). The stream
	// adds its own group, isolation and commit options.
	KafkaOpts []kgo.Opt
	// Names resolves the advantages topic; Topic, when set, overrides it.
	Names topics.Names
	Topic string
	// Group is the consumer group (default DefaultGroup). Trainers of one run share a group;
	// a second group reads the same steps independently.
	Group string
	// RunID keeps only this run's steps; empty keeps every run.
	RunID string
	// ClientID is the Kafka client id (default ClientID(RunID), which names the run to the
	// group's other members).
	ClientID string
	// MaxBufferedSteps: see DefaultMaxBufferedSteps.
	MaxBufferedSteps int
	// Logger receives progress and problems (default slog.Default()).
	Logger *slog.Logger
	// OnSkip is called, outside the stream's locks, with each *RecordError (a record that was
	// skipped, or a step abandoned). The default logs it at warn level. steps.Stats counts them too.
	OnSkip func(error)
	// MaxBatchBytes is the decompressed size above which a record batch is refused unread and
	// skipped (0: topics.MaxBatchBytes(topics.MaxAdvantageBytes)). The trainer may not write the
	// DLQ (docs/security.md), so a skipped batch is logged, counted (BatchesSkipped,
	// steps.Stats.SkippedBatches) and committed past, not dead-lettered.
	MaxBatchBytes int
	// BatchesSkipped, when set, counts skipped batches (oversize.NewCounter).
	BatchesSkipped *prometheus.CounterVec
}

// Stream delivers complete steps from the advantages topic to a trainer and commits offsets only
// for acknowledged steps. Next and Ack may be called from different goroutines.
type Stream struct {
	cfg   Config
	topic string
	log   *slog.Logger
	cl    *kgo.Client
	skip  *oversize.Skipper

	commitMu sync.Mutex // serializes commits so a smaller offset never overtakes a larger one
	mu       sync.Mutex // guards everything below
	asm      *steps.Assembler
	ready    []*Step
	unacked  map[*Step]struct{}
	closed   bool
}

// New joins the consumer group and starts fetching. A group without committed offsets starts
// at the beginning of the topic, so a trainer never silently misses steps.
func New(cfg Config) (*Stream, error) {
	topic := cmp.Or(cfg.Topic, cfg.Names.Advantages())
	cfg.Group = cmp.Or(cfg.Group, DefaultGroup)
	if cfg.RunID != "" && !topics.ValidID(cfg.RunID) {
		return nil, fmt.Errorf("trainer: run id %q is not a valid id", cfg.RunID)
	}
	s := &Stream{
		cfg: cfg, topic: topic,
		asm:     steps.NewAssembler(steps.AssemblerConfig{Run: cfg.RunID, MaxBufferedSteps: cfg.MaxBufferedSteps}),
		unacked: make(map[*Step]struct{}),
	}
	s.log = cmp.Or(cfg.Logger, slog.Default()).With("component", "trainer", "topic", topic, "group", cfg.Group)
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = topics.MaxBatchBytes(topics.MaxAdvantageBytes)
	}
	opts := append(append([]kgo.Opt(nil), cfg.KafkaOpts...),
		kgo.MaxDecompressBatchBytes(cfg.MaxBatchBytes),
		kgo.ClientID(cmp.Or(cfg.ClientID, ClientID(cfg.RunID))),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Records of one poll are assembled before a rebalance may revoke their partitions, so
		// the stream never delivers or commits for a partition it no longer owns.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: kafka client: %w", err)
	}
	s.cl = cl
	// Without the stream's topic attribute: the skipper names the batch's own.
	skipLog := cmp.Or(cfg.Logger, slog.Default()).With("component", "trainer", "group", cfg.Group)
	s.skip = oversize.NewSkipper(cl, skipLog, cfg.BatchesSkipped, "committed past without a dead letter (the trainer may not write the DLQ)")
	return s, nil
}

// Next blocks until a complete step is available and returns it. Steps of one run come in step
// order. Skipped records do not end the stream (see Config.OnSkip); Next returns an error only
// when ctx ends or the stream is closed. Every returned step should eventually be acknowledged
// with Ack: until then no offset at or after its first record is committed.
func (s *Stream) Next(ctx context.Context) (*Step, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if len(s.ready) > 0 {
			st := s.ready[0]
			s.ready = s.ready[1:]
			s.unacked[st] = struct{}{}
			s.mu.Unlock()
			return st, nil
		}
		s.mu.Unlock()
		if err := s.poll(ctx); err != nil {
			return nil, err
		}
	}
}

func (s *Stream) poll(ctx context.Context) error {
	fs := s.cl.PollFetches(ctx)
	defer s.cl.AllowRebalance()
	if fs.IsClientClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	refused := s.skip.Skip(fs)
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !oversize.Refused(err) {
			s.log.Warn("fetch error", "fetch_topic", t, "partition", p, "err", err)
		}
	})
	var skipped []error
	s.mu.Lock()
	for _, ref := range refused {
		// Consumed through its last offset: the next commit passes the batch.
		s.asm.SkipBatch(steps.Pos{Topic: ref.Topic, Partition: ref.Partition, Offset: ref.NextOffset - 1})
	}
	fs.EachRecord(func(r *kgo.Record) {
		ready, errs := s.asm.Add(r)
		for _, st := range ready {
			s.ready = append(s.ready, newStep(st, s))
		}
		skipped = append(skipped, errs...)
	})
	s.mu.Unlock()
	for _, err := range skipped {
		if s.cfg.OnSkip != nil {
			s.cfg.OnSkip(err)
		} else {
			s.log.Warn("skipped advantage record", "err", err)
		}
	}
	return nil
}

// Ack acknowledges the step: its records are released and every offset that is now safe is
// committed synchronously (up to the oldest record of any step not yet acknowledged or still
// incomplete, per partition). Acking twice is a no-op. A step whose partition was revoked
// meanwhile returns ErrRevoked: its new owner delivers it again.
func (st *Step) Ack(ctx context.Context) error {
	s := st.stream
	if s == nil {
		return fmt.Errorf("ack run %s step %d: step was not delivered by a Stream", st.Run, st.Step)
	}
	s.mu.Lock()
	switch {
	case st.revoked:
		s.mu.Unlock()
		return fmt.Errorf("ack run %s step %d: %w", st.Run, st.Step, ErrRevoked)
	case st.acked:
		s.mu.Unlock()
		return nil
	}
	st.acked = true
	delete(s.unacked, st)
	s.asm.Release(st.asm)
	s.mu.Unlock()
	if err := s.commit(ctx, nil); err != nil {
		return fmt.Errorf("ack run %s step %d: %w", st.Run, st.Step, err)
	}
	return nil
}

// commit commits what is safe; only is an optional filter of partitions (nil: all).
func (s *Stream) commit(ctx context.Context, only map[string][]int32) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	offs := s.asm.Offsets().Committable()
	s.mu.Unlock()
	if only != nil {
		offs = filterPartitions(offs, only)
	}
	if len(offs) == 0 {
		return nil
	}
	req := make(map[string]map[int32]kgo.EpochOffset, len(offs))
	for t, ps := range offs {
		req[t] = make(map[int32]kgo.EpochOffset, len(ps))
		for p, at := range ps {
			req[t][p] = kgo.EpochOffset{Epoch: -1, Offset: at}
		}
	}
	if err := stage.CommitOffsets(ctx, s.cl, req); err != nil {
		return err
	}
	s.mu.Lock()
	s.asm.Offsets().MarkCommitted(offs)
	s.mu.Unlock()
	s.log.Debug("committed", "offsets", offs)
	return nil
}

func filterPartitions(offs map[string]map[int32]int64, only map[string][]int32) map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for t, ps := range only {
		for _, p := range ps {
			if at, ok := offs[t][p]; ok {
				if out[t] == nil {
					out[t] = make(map[int32]int64)
				}
				out[t][p] = at
			}
		}
	}
	return out
}

func (s *Stream) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if err := s.commit(ctx, revoked); err != nil {
		s.log.Warn("commit on revoke failed", "err", err)
	}
	s.drop(revoked)
}

func (s *Stream) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.drop(lost)
}

// partKey names one partition of one topic.
type partKey struct {
	topic     string
	partition int32
}

// drop forgets revoked partitions: steps not yet handed out are discarded, handed-out steps
// can no longer be acknowledged (ErrRevoked).
func (s *Stream) drop(parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := make(map[partKey]bool)
	for t, ps := range parts {
		for _, p := range ps {
			gone[partKey{t, p}] = true
			s.asm.DropPartition(t, p)
		}
	}
	touches := func(st *Step) bool {
		for _, r := range st.Records {
			if gone[partKey{r.Topic, r.Partition}] {
				return true
			}
		}
		return false
	}
	kept := s.ready[:0]
	for _, st := range s.ready {
		if !touches(st) {
			kept = append(kept, st)
		}
	}
	s.ready = kept
	for st := range s.unacked {
		if touches(st) {
			st.revoked = true
			delete(s.unacked, st)
		}
	}
	s.log.Info("partitions revoked", "partitions", parts)
}

// Run calls fn for every step and acknowledges the step when fn returns nil. It returns fn's
// error (the step stays unacknowledged and is re-delivered to the group later), or the error of
// Next or Ack; ctx's error when ctx ends.
func (s *Stream) Run(ctx context.Context, fn func(context.Context, *Step) error) error {
	for {
		st, err := s.Next(ctx)
		if err != nil {
			return err
		}
		if err := fn(ctx, st); err != nil {
			return fmt.Errorf("run %s step %d: %w", st.Run, st.Step, err)
		}
		if err := st.Ack(ctx); err != nil {
			if errors.Is(err, ErrRevoked) {
				s.log.Info("step revoked before ack; its new owner re-delivers it", "run", st.Run, "step", st.Step)
				continue
			}
			return err
		}
	}
}

// Stats returns the stream's counters.
func (s *Stream) Stats() steps.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asm.Stats()
}

// Close commits the offsets of acknowledged steps, leaves the group and closes the client.
// Unacknowledged steps are left for the group to re-deliver.
func (s *Stream) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeCommitTimeout)
	defer cancel()
	if err := s.commit(ctx, nil); err != nil {
		s.log.Warn("final commit failed", "err", err)
	}
	s.cl.Close()
}
