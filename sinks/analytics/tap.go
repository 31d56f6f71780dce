package analytics

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/topics"
)

// Defaults of Config.
const (
	DefaultGroup     = "wmrl-analytics"
	DefaultRollSteps = 10
)

// shutdownTimeout bounds flushing partial files and the final commit on shutdown.
const shutdownTimeout = 30 * time.Second

// sessionTimeout is the reader's group session timeout: how long the broker keeps the membership
// of a tap that died without leaving.
const sessionTimeout = 30 * time.Second

// DefaultGroupWait is how long Run waits for the group to have no members: a crashed
// predecessor's membership expires after sessionTimeout.
const DefaultGroupWait = sessionTimeout + 5*time.Second

// One tap per consumer group is supported: kafka-go's Reader tells the application neither which
// partitions it lost in a rebalance nor which it holds, so a tap sharing its group could commit
// offsets of partitions now owned by another instance and move them backwards.
var (
	// ErrGroupInUse is returned by Run when the group still has members after Config.GroupWait.
	ErrGroupInUse = errors.New("analytics: consumer group has other members (one tap per group is supported)")
	// ErrRebalanced is returned by Run when the group rebalanced after the tap joined it (another
	// consumer joined or left); the tap stops without committing, so nothing is lost.
	ErrRebalanced = errors.New("analytics: consumer group rebalanced (one tap per group is supported)")
)

// Config configures a Tap.
type Config struct {
	// Brokers are the seed brokers; TLS and SASL are optional (kafka-go's types).
	Brokers []string
	TLS     *tls.Config
	SASL    sasl.Mechanism
	// Names resolves the topics; AdvantagesTopic and CalibrationTopic override them.
	Names            topics.Names
	AdvantagesTopic  string
	CalibrationTopic string
	// Group is the tap's own consumer group (default DefaultGroup).
	Group string
	// Dir receives the Parquet files; it is created if missing.
	Dir string
	// RollSteps closes a run's files once they hold this many steps (default DefaultRollSteps).
	RollSteps int
	// RunID keeps only this run; empty keeps all.
	RunID string
	// GroupWait bounds how long Run waits for other members to leave Group before failing
	// with ErrGroupInUse (default DefaultGroupWait).
	GroupWait time.Duration
	// MaxBatchBytes is the decompressed size past which a record batch is refused and skipped
	// unread (default topics.MaxBatchBytes(topics.MaxAdvantageBytes); see batchlimit.go).
	MaxBatchBytes int
	Logger        *slog.Logger
}

// Stats counts what the tap has done.
type Stats struct {
	Messages    int64 // messages fetched
	Hidden      int64 // aborted records and transaction markers dropped
	Steps       int64 // advantage steps written
	Rows        int64 // advantage rows written
	Calibration int64 // calibration snapshots written
	Files       int64 // files closed
	Skipped     int64 // undecodable records skipped
	// SkippedBatches counts record batches refused unread: they decompress past MaxBatchBytes.
	SkippedBatches int64
}

// Tap consumes the advantages and calibration topics and writes Parquet files.
type Tap struct {
	cfg      Config
	advTopic string
	calTopic string
	log      *slog.Logger
	rcfg     kafka.ReaderConfig
	r        *kafka.Reader // created by Run: a kafka-go group reader joins its group at once
	client   *kafka.Client
	filter   *txnFilter
	asm      *steps.Assembler
	runs     map[string]*segment
	mu       sync.Mutex // guards stats, joins and the r field, read by Stats while Run runs
	// joins counts the reader's group generations (kafka-go's Rebalances); more than one means
	// the group changed under the tap.
	joins int64
	stats Stats
	// refused carries the batches kafka-go's Reader refused (refusalLogger) to Run; stopFetch
	// cancels the FetchMessage that waits meanwhile.
	refused   chan refusal
	stopFetch atomic.Pointer[context.CancelCauseFunc]
}

// segment is what a run has buffered for its next pair of files.
type segment struct {
	steps []*steps.Step
	calib []calEntry
	// calSteps counts distinct calibration steps.
	calSteps map[int64]struct{}
}

type calEntry struct {
	row CalibrationRow
	pos steps.Pos
}

// New creates the output directory and configures the kafka-go reader; Run creates it and
// consumes.
func New(cfg Config) (*Tap, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("analytics: no brokers")
	}
	if cfg.Dir == "" {
		return nil, errors.New("analytics: no output directory")
	}
	cfg.Group = cmp.Or(cfg.Group, DefaultGroup)
	if cfg.RollSteps <= 0 {
		cfg.RollSteps = DefaultRollSteps
	}
	if cfg.GroupWait <= 0 {
		cfg.GroupWait = DefaultGroupWait
	}
	cfg.MaxBatchBytes = cmp.Or(cfg.MaxBatchBytes, topics.MaxBatchBytes(topics.MaxAdvantageBytes))
	limitBatches(cfg.MaxBatchBytes)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("analytics: %w", err)
	}
	t := &Tap{cfg: cfg, advTopic: cmp.Or(cfg.AdvantagesTopic, cfg.Names.Advantages()),
		calTopic: cmp.Or(cfg.CalibrationTopic, cfg.Names.Calibration()), runs: make(map[string]*segment),
		asm: steps.NewAssembler(steps.AssemblerConfig{Run: cfg.RunID}), refused: make(chan refusal, 1)}
	t.log = cmp.Or(cfg.Logger, slog.Default()).With("component", "analytics", "group", cfg.Group)
	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: cfg.TLS, SASLMechanism: cfg.SASL}
	t.rcfg = kafka.ReaderConfig{
		Brokers:        cfg.Brokers,
		GroupID:        cfg.Group,
		GroupTopics:    []string{t.advTopic, t.calTopic},
		IsolationLevel: kafka.ReadCommitted,
		StartOffset:    kafka.FirstOffset,
		MaxWait:        500 * time.Millisecond,
		SessionTimeout: sessionTimeout,
		Dialer:         dialer,
		// CommitInterval 0: CommitMessages commits synchronously, after the file is durable.
		ErrorLogger: refusalLogger(func(msg string) { t.log.Warn(msg) }, t.refuse),
	}
	transport := &kafka.Transport{TLS: cfg.TLS, SASL: cfg.SASL}
	t.client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: transport}
	t.filter = newTxnFilter(transport, kafka.TCP(cfg.Brokers...))
	return t, nil
}

// Run consumes until ctx ends, then flushes partial files, commits and closes the reader
// (SIGTERM handling: cancel ctx). It returns nil after a clean shutdown. It first waits for the
// group to be empty (ErrGroupInUse if it is not within Config.GroupWait), and stops with
// ErrRebalanced, without committing, if the group rebalances later.
func (t *Tap) Run(ctx context.Context) error {
	if t.r != nil {
		return errors.New("analytics: Run called twice")
	}
	if err := t.waitGroupEmpty(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	t.mu.Lock()
	t.r = kafka.NewReader(t.rcfg)
	t.mu.Unlock()
	defer func() { t.r.Close() }()
	for {
		fctx, stop := context.WithCancelCause(ctx)
		t.stopFetch.Store(&stop)
		select {
		case r := <-t.refused: // refused between two fetches
			stop(nil)
			if err := t.skipBatch(ctx, r); err != nil {
				return err
			}
			continue
		default:
		}
		m, err := t.r.FetchMessage(fctx)
		stop(nil)
		if err != nil {
			if ctx.Err() != nil {
				return t.shutdown()
			}
			if errors.Is(context.Cause(fctx), errRefused) {
				continue // the refusal is in t.refused: the next round skips the batch
			}
			return fmt.Errorf("analytics: fetch: %w", err)
		}
		if err := t.handle(ctx, m); err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrRebalanced) {
				return t.shutdown()
			}
			return err
		}
	}
}

// waitGroupEmpty returns once the group has no members: an earlier tap that crashed keeps its
// membership until its session times out, and one that is alive must not share the group.
func (t *Tap) waitGroupEmpty(ctx context.Context) error {
	deadline := time.Now().Add(t.cfg.GroupWait)
	for warned := false; ; warned = true {
		resp, err := t.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{t.cfg.Group}})
		if err != nil {
			return fmt.Errorf("analytics: describe group %s: %w", t.cfg.Group, err)
		}
		var members []string
		for _, g := range resp.Groups {
			if g.Error != nil {
				return fmt.Errorf("analytics: describe group %s: %w", t.cfg.Group, g.Error)
			}
			for _, m := range g.Members {
				members = append(members, m.ClientID+"@"+m.ClientHost)
			}
		}
		if len(members) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: group %s has members %s after %s", ErrGroupInUse, t.cfg.Group, strings.Join(members, ", "), t.cfg.GroupWait)
		}
		if !warned {
			t.log.Warn("group has members; waiting for them to leave or time out (one tap per group is supported)", "members", members, "wait", t.cfg.GroupWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// refuse hands a refused batch to Run (one at a time: kafka-go logs it again at every retry until
// Run has moved past it) and stops Run's fetch.
func (t *Tap) refuse(r refusal) {
	select {
	case t.refused <- r:
	default:
	}
	if stop := t.stopFetch.Load(); stop != nil {
		(*stop)(errRefused)
	}
}

// skipBatch moves past the refused batch r. kafka-go's group reader cannot seek, so the tap makes
// every buffered file durable and commits, closes the reader (which stops its retries of the
// batch and leaves the group), finds the batch's end, commits the partition past it as the
// group's only member would, and starts a new reader there. It counts and warns. An incomplete
// step holding a record before the batch on its partition blocks that commit: the tap then stops
// with the error rather than meet the batch again.
func (t *Tap) skipBatch(ctx context.Context, r refusal) error {
	where := fmt.Sprintf("%s/%d@%d", r.topic, r.partition, r.offset)
	lo, err := t.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		r.topic: {kafka.LastOffsetOf(r.partition)}}})
	if err != nil {
		return fmt.Errorf("analytics: refused batch at %s: %w", where, err)
	}
	var high int64
	for _, po := range lo.Topics[r.topic] {
		if po.Partition == r.partition {
			if po.Error != nil {
				return fmt.Errorf("analytics: refused batch at %s: %w", where, po.Error)
			}
			high = po.LastOffset
		}
	}
	for _, run := range slices.Sorted(maps.Keys(t.runs)) {
		if err := t.roll(ctx, run); err != nil {
			return err
		}
	}
	if err := t.r.Close(); err != nil {
		return fmt.Errorf("analytics: reader: %w", err)
	}
	end, err := t.filter.batchEnd(ctx, r.topic, r.partition, r.offset, high)
	if err != nil {
		return fmt.Errorf("analytics: refused batch: %w", err)
	}
	t.filter.skipTo(r.topic, r.partition, end)
	t.asm.Offsets().Consumed(steps.Pos{Topic: r.topic, Partition: int32(r.partition), Offset: end - 1})
	offs := t.asm.Offsets().Committable()
	if at := offs[r.topic][int32(r.partition)]; at < end {
		return fmt.Errorf("analytics: %s/%d offsets %d..%d decompress past %d bytes, and an incomplete step holds offset %d before them: cannot commit past the batch", r.topic, r.partition, r.offset, end-1, t.cfg.MaxBatchBytes, at)
	}
	if err := t.commitAlone(ctx, offs); err != nil {
		return err
	}
	t.count(func(s *Stats) { s.SkippedBatches++ })
	t.log.Warn("record batch decompresses past the limit; skipped unread", "topic", r.topic, "partition", r.partition,
		"first_offset", r.offset, "next_offset", end, "limit_bytes", t.cfg.MaxBatchBytes, "reason", topics.ReasonBatchTooLarge)
	select { // a refusal the old reader logged again before it closed
	case <-t.refused:
	default:
	}
	t.mu.Lock()
	t.joins = 0 // the new reader's join is the tap's own, not another member's
	t.r = kafka.NewReader(t.rcfg)
	t.mu.Unlock()
	return nil
}

// commitAlone commits offs for the tap's group while it has no member (its reader closed), as
// generation -1 does; the group may take a moment to settle after the reader left it.
func (t *Tap) commitAlone(ctx context.Context, offs map[string]map[int32]int64) error {
	req := &kafka.OffsetCommitRequest{GroupID: t.cfg.Group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{}}
	for topic, ps := range offs {
		for p, at := range ps {
			req.Topics[topic] = append(req.Topics[topic], kafka.OffsetCommit{Partition: int(p), Offset: at})
		}
	}
	var errs []error
	for attempt := 0; attempt < 20; attempt++ {
		resp, err := t.client.OffsetCommit(ctx, req)
		errs = errs[:0]
		if err != nil {
			errs = append(errs, err)
		} else {
			for _, ps := range resp.Topics {
				for _, p := range ps {
					if p.Error != nil {
						errs = append(errs, p.Error)
					}
				}
			}
		}
		if len(errs) == 0 {
			t.asm.Offsets().MarkCommitted(offs)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("analytics: commit past a refused batch: %w", errors.Join(errs...))
}

func (t *Tap) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for _, run := range slices.Sorted(maps.Keys(t.runs)) {
		if err := t.roll(ctx, run); err != nil {
			errs = append(errs, err)
		}
	}
	t.log.Info("analytics stopped", "stats", fmt.Sprintf("%+v", t.Stats()))
	return errors.Join(errs...)
}

func (t *Tap) handle(ctx context.Context, m kafka.Message) error {
	t.count(func(s *Stats) { s.Messages++ })
	pos := steps.Pos{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset}
	ok, err := t.filter.visible(ctx, m.Topic, m.Partition, m.Offset)
	if err != nil {
		return fmt.Errorf("analytics: %w", err)
	}
	if !ok {
		t.count(func(s *Stats) { s.Hidden++ })
		t.asm.Offsets().Consumed(pos)
		return nil
	}
	rec := &kgo.Record{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Key: m.Key, Value: m.Value}
	for _, h := range m.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	switch m.Topic {
	case t.advTopic:
		ready, errs := t.asm.Add(rec)
		for _, err := range errs {
			t.count(func(s *Stats) { s.Skipped++ })
			t.log.Warn("skipped advantage record", "err", err)
		}
		for _, st := range ready {
			seg := t.segment(st.Run)
			seg.steps = append(seg.steps, st)
			if len(seg.steps) >= t.cfg.RollSteps {
				if err := t.roll(ctx, st.Run); err != nil {
					return err
				}
			}
		}
	case t.calTopic:
		if m.Value == nil || topics.IsCalibrationChunk(rec) || topics.IsCalibrationEnd(rec) {
			// A tombstone, a window chunk of a correction state or a run's end, not a snapshot.
			t.asm.Offsets().Consumed(pos)
			return nil
		}
		// By content-type: binary, or a framed Protobuf snapshot when correct has a registry.
		snap, err := topics.DecodeCalibrationRecord(rec)
		if err != nil {
			t.count(func(s *Stats) { s.Skipped++ })
			t.asm.Offsets().Consumed(pos)
			t.log.Warn("skipped calibration record", "record", pos.String(), "err", err)
			return nil
		}
		if t.cfg.RunID != "" && snap.RunID != t.cfg.RunID {
			t.asm.Offsets().Consumed(pos)
			return nil
		}
		t.asm.Offsets().Hold(pos)
		seg := t.segment(snap.RunID)
		seg.calib = append(seg.calib, calEntry{row: CalibrationRowOf(snap), pos: pos})
		seg.calSteps[snap.Step] = struct{}{}
		if len(seg.calSteps) >= t.cfg.RollSteps {
			return t.roll(ctx, snap.RunID)
		}
	default:
		t.asm.Offsets().Consumed(pos)
	}
	return nil
}

func (t *Tap) segment(run string) *segment {
	s := t.runs[run]
	if s == nil {
		s = &segment{calSteps: make(map[int64]struct{})}
		t.runs[run] = s
	}
	return s
}

// roll writes the run's buffered steps and snapshots to their files, makes them durable, and
// only then releases and commits their offsets.
func (t *Tap) roll(ctx context.Context, run string) error {
	seg := t.runs[run]
	if seg == nil {
		return nil
	}
	if len(seg.steps) > 0 {
		sort.Slice(seg.steps, func(i, j int) bool { return seg.steps[i].Step < seg.steps[j].Step })
		var rows [][]topics.AdvantageRow
		n := 0
		for _, st := range seg.steps {
			rows = append(rows, st.Rows)
			n += len(st.Rows)
		}
		name := fmt.Sprintf("advantages-%s-%d-%d.parquet", run, seg.steps[0].Step, seg.steps[len(seg.steps)-1].Step)
		data, err := encodeAdvantagesParquet(rows)
		if err != nil {
			return fmt.Errorf("analytics: %s: %w", name, err)
		}
		if err := writeFileAtomic(t.cfg.Dir, name, data); err != nil {
			return fmt.Errorf("analytics: %w", err)
		}
		t.count(func(s *Stats) { s.Files++; s.Steps += int64(len(seg.steps)); s.Rows += int64(n) })
		t.log.Info("wrote advantages", "file", name, "steps", len(seg.steps), "rows", n)
	}
	if len(seg.calib) > 0 {
		slices.SortStableFunc(seg.calib, func(a, b calEntry) int {
			return cmp.Or(cmp.Compare(a.row.Step, b.row.Step), cmp.Compare(a.row.Stream, b.row.Stream))
		})
		rows := make([]CalibrationRow, len(seg.calib))
		for i, c := range seg.calib {
			rows[i] = c.row
		}
		name := fmt.Sprintf("calibration-%s-%d-%d.parquet", run, rows[0].Step, rows[len(rows)-1].Step)
		data, err := encodeCalibrationParquet(rows)
		if err != nil {
			return fmt.Errorf("analytics: %s: %w", name, err)
		}
		if err := writeFileAtomic(t.cfg.Dir, name, data); err != nil {
			return fmt.Errorf("analytics: %w", err)
		}
		t.count(func(s *Stats) { s.Files++; s.Calibration += int64(len(rows)) })
		t.log.Info("wrote calibration", "file", name, "snapshots", len(rows))
	}
	for _, st := range seg.steps {
		t.asm.Release(st)
	}
	for _, c := range seg.calib {
		t.asm.Offsets().Release(c.pos)
	}
	delete(t.runs, run)
	return t.commit(ctx)
}

func (t *Tap) commit(ctx context.Context) error {
	offs := t.asm.Offsets().Committable()
	var msgs []kafka.Message
	for topic, ps := range offs {
		for p, at := range ps {
			// kafka-go commits a message's offset + 1.
			msgs = append(msgs, kafka.Message{Topic: topic, Partition: int(p), Offset: at - 1})
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	// kafka-go does not say which partitions a rebalance took away, so after a second
	// generation these offsets may belong to another member: refuse to commit them.
	if n := t.generations(); n > 1 {
		return fmt.Errorf("%w: group %s, %d generations since the tap joined; restart it once it is alone in the group", ErrRebalanced, t.cfg.Group, n)
	}
	if err := t.r.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("analytics: commit: %w", err)
	}
	t.asm.Offsets().MarkCommitted(offs)
	return nil
}

// Stats returns the counters so far; it is safe to call while Run runs.
func (t *Tap) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// generations returns how many group generations the reader has joined so far.
func (t *Tap) generations() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.r != nil {
		t.joins += t.r.Stats().Rebalances
	}
	return t.joins
}

func (t *Tap) count(f func(*Stats)) {
	t.mu.Lock()
	f(&t.stats)
	t.mu.Unlock()
}
