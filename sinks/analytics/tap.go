package analytics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/topics"
)

// Defaults of Config.
const (
	DefaultGroup     = "wmrl-analytics"
	DefaultRollSteps = 10
)

// shutdownTimeout bounds flushing partial files and the final commit on shutdown.
const shutdownTimeout = 30 * time.Second

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
	RunID  string
	Logger *slog.Logger
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
}

// Tap consumes the advantages and calibration topics and writes Parquet files.
type Tap struct {
	cfg      Config
	advTopic string
	calTopic string
	log      *slog.Logger
	r        *kafka.Reader
	filter   *txnFilter
	asm      *trainer.Assembler
	runs     map[string]*segment
	stats    Stats
}

// segment is what a run has buffered for its next pair of files.
type segment struct {
	steps []*trainer.Step
	calib []calEntry
	// calSteps counts distinct calibration steps.
	calSteps map[int64]struct{}
}

type calEntry struct {
	row CalibrationRow
	pos trainer.Pos
}

// New creates the output directory and the kafka-go reader; consumption starts in Run.
func New(cfg Config) (*Tap, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("analytics: no brokers")
	}
	if cfg.Dir == "" {
		return nil, errors.New("analytics: no output directory")
	}
	if cfg.Names.Prefix == "" {
		cfg.Names = topics.NewNames("")
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.RollSteps <= 0 {
		cfg.RollSteps = DefaultRollSteps
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("analytics: %w", err)
	}
	t := &Tap{cfg: cfg, advTopic: cfg.AdvantagesTopic, calTopic: cfg.CalibrationTopic, runs: make(map[string]*segment),
		asm: trainer.NewAssembler(trainer.AssemblerConfig{Run: cfg.RunID})}
	if t.advTopic == "" {
		t.advTopic = cfg.Names.Advantages()
	}
	if t.calTopic == "" {
		t.calTopic = cfg.Names.Calibration()
	}
	t.log = cfg.Logger
	if t.log == nil {
		t.log = slog.Default()
	}
	t.log = t.log.With("component", "analytics", "group", cfg.Group)
	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: cfg.TLS, SASLMechanism: cfg.SASL}
	t.r = kafka.NewReader(kafka.ReaderConfig{
		Brokers:        cfg.Brokers,
		GroupID:        cfg.Group,
		GroupTopics:    []string{t.advTopic, t.calTopic},
		IsolationLevel: kafka.ReadCommitted,
		StartOffset:    kafka.FirstOffset,
		MaxWait:        500 * time.Millisecond,
		Dialer:         dialer,
		// CommitInterval 0: CommitMessages commits synchronously, after the file is durable.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) { t.log.Warn(fmt.Sprintf(msg, args...)) }),
	})
	t.filter = newTxnFilter(&kafka.Transport{TLS: cfg.TLS, SASL: cfg.SASL}, kafka.TCP(cfg.Brokers...))
	return t, nil
}

// Run consumes until ctx ends, then flushes partial files, commits and closes the reader
// (SIGTERM handling: cancel ctx). It returns nil after a clean shutdown.
func (t *Tap) Run(ctx context.Context) error {
	defer t.r.Close()
	for {
		m, err := t.r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return t.shutdown()
			}
			return fmt.Errorf("analytics: fetch: %w", err)
		}
		if err := t.handle(ctx, m); err != nil {
			if ctx.Err() != nil {
				return t.shutdown()
			}
			return err
		}
	}
}

func (t *Tap) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for _, run := range sortedRuns(t.runs) {
		if err := t.roll(ctx, run); err != nil {
			errs = append(errs, err)
		}
	}
	t.log.Info("analytics stopped", "stats", fmt.Sprintf("%+v", t.stats))
	return errors.Join(errs...)
}

func (t *Tap) handle(ctx context.Context, m kafka.Message) error {
	t.stats.Messages++
	pos := trainer.Pos{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset}
	ok, err := t.filter.visible(ctx, m.Topic, m.Partition, m.Offset)
	if err != nil {
		return fmt.Errorf("analytics: %w", err)
	}
	if !ok {
		t.stats.Hidden++
		t.asm.Offsets().Consumed(pos)
		return nil
	}
	switch m.Topic {
	case t.advTopic:
		rec := &kgo.Record{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		steps, errs := t.asm.Add(rec)
		for _, err := range errs {
			t.stats.Skipped++
			t.log.Warn("skipped advantage record", "err", err)
		}
		for _, st := range steps {
			seg := t.segment(st.Run)
			seg.steps = append(seg.steps, st)
			if len(seg.steps) >= t.cfg.RollSteps {
				if err := t.roll(ctx, st.Run); err != nil {
					return err
				}
			}
		}
	case t.calTopic:
		snap, err := topics.DecodeCalibration(m.Value)
		if err != nil {
			t.stats.Skipped++
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
		t.stats.Files++
		t.stats.Steps += int64(len(seg.steps))
		t.stats.Rows += int64(n)
		t.log.Info("wrote advantages", "file", name, "steps", len(seg.steps), "rows", n)
	}
	if len(seg.calib) > 0 {
		sort.SliceStable(seg.calib, func(i, j int) bool {
			a, b := seg.calib[i].row, seg.calib[j].row
			if a.Step != b.Step {
				return a.Step < b.Step
			}
			return a.Stream < b.Stream
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
		t.stats.Files++
		t.stats.Calibration += int64(len(rows))
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
	if err := t.r.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("analytics: commit: %w", err)
	}
	t.asm.Offsets().MarkCommitted(offs)
	return nil
}

// Stats returns the counters; call it after Run returns or from the Run goroutine.
func (t *Tap) Stats() Stats { return t.stats }

func sortedRuns(m map[string]*segment) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
