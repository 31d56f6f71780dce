package steps

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// DefaultMaxBufferedSteps bounds how many complete steps of one run may wait behind an
// incomplete earlier step before that step is abandoned. Within one partition a later step
// cannot normally complete first, so reaching the bound means the earlier step is broken.
const DefaultMaxBufferedSteps = 16

// deliveredMemory is how many delivered steps per run keep their chunk hashes, so a replayed
// copy of a recent step is recognized as a duplicate rather than reported as stale.
const deliveredMemory = 1024

// Step is one complete training step of one run.
type Step struct {
	Run  string
	Step int64
	// Rows are the step's advantage rows: chunk 0's rows first, each chunk in the order the
	// correction consumer wrote it (canonical order, see topics.SortRows).
	Rows []topics.AdvantageRow
	// Records names the records the step arrived in, in chunk order (len = chunk count).
	Records []Pos
}

// Stats counts what an Assembler (or a Stream) has seen.
type Stats struct {
	// Records is every record fed in, including control records and other runs' records.
	Records int64
	// Steps and Rows count delivered steps and their rows.
	Steps int64
	Rows  int64
	// Duplicates counts byte-identical copies of a chunk already held or delivered (ignored).
	Duplicates int64
	// Skipped counts records rejected with a *RecordError.
	Skipped int64
	// Filtered counts records of runs other than AssemblerConfig.Run.
	Filtered int64
	// Abandoned counts incomplete steps given up on (ErrAbandoned).
	Abandoned int64
	// SkippedBatches counts record batches a consumer skipped unread (SkipBatch): they
	// decompress past its limit.
	SkippedBatches int64
}

// AssemblerConfig configures an Assembler.
type AssemblerConfig struct {
	// Run keeps only this run's records (by the wmrl-run header, without decoding); "" keeps all.
	Run string
	// MaxBufferedSteps is the bound described at DefaultMaxBufferedSteps (0 means the default).
	MaxBufferedSteps int
}

// Assembler turns advantage records into complete steps. It is the client-independent core of
// the trainer sink's Stream, its DigestTopicResult and the analytics tap: feed it records in partition order with Add, hand
// each delivered step back with Release once it is durable, and commit Offsets().Committable().
// It is not safe for concurrent use.
type Assembler struct {
	cfg     AssemblerConfig
	runs    map[string]*runState
	offsets *Offsets
	stats   Stats
}

type runState struct {
	open      map[int64]*partial // steps with chunks still missing
	ready     map[int64]*partial // complete steps waiting behind a lower open step
	delivered int64              // highest step delivered, -1 if none
	sums      map[int64]chunkSums
	sumOrder  []int64
	parts     map[topicPartition]struct{}
}

type chunkSums [][sha256.Size]byte

type partial struct {
	n      int
	have   int
	chunks []chunk
}

type chunk struct {
	ok   bool
	sum  [sha256.Size]byte
	rows []topics.AdvantageRow
	pos  Pos
}

// NewAssembler returns an empty assembler.
func NewAssembler(cfg AssemblerConfig) *Assembler {
	if cfg.MaxBufferedSteps <= 0 {
		cfg.MaxBufferedSteps = DefaultMaxBufferedSteps
	}
	return &Assembler{cfg: cfg, runs: make(map[string]*runState), offsets: NewOffsets()}
}

// Offsets is the assembler's offset tracker: records of steps not yet released are held. Callers
// may hold further records of their own (the analytics tap holds calibration records) in it.
func (a *Assembler) Offsets() *Offsets { return a.offsets }

// Stats returns the counters so far.
func (a *Assembler) Stats() Stats { return a.stats }

// Release ends the hold on a delivered step's records; call it once the step is acknowledged.
func (a *Assembler) Release(s *Step) { a.offsets.Release(s.Records...) }

// Add feeds one record. It returns the steps that became deliverable, in step order per run,
// and one *RecordError per record it rejected or step it abandoned; a rejected record is
// consumed and skipped, never retried.
func (a *Assembler) Add(rec *kgo.Record) ([]*Step, []error) {
	pos := Pos{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	a.stats.Records++
	if rec.Attrs.IsControl() {
		a.offsets.Consumed(pos)
		return nil, nil
	}
	run, step, i, n, err := parseHeaders(rec)
	if err != nil {
		return nil, a.reject(pos, run, step, err)
	}
	if a.cfg.Run != "" && run != a.cfg.Run {
		a.offsets.Consumed(pos)
		a.stats.Filtered++
		return nil, nil
	}
	rs := a.run(run)
	rs.parts[topicPartition{pos.Topic, pos.Partition}] = struct{}{}
	sum := sha256.Sum256(rec.Value)

	if step <= rs.delivered {
		sums, known := rs.sums[step]
		switch {
		case known && len(sums) == n && sums[i] == sum:
			return nil, a.duplicate(pos)
		case !known:
			return nil, a.reject(pos, run, step, fmt.Errorf("step %d is at or below step %d, already delivered for run %s: %w", step, rs.delivered, run, ErrStale))
		case len(sums) != n:
			return nil, a.reject(pos, run, step, fmt.Errorf("chunk %d/%d, but the delivered step had %d chunks: %w", i, n, len(sums), ErrChunkMismatch))
		default:
			return nil, a.reject(pos, run, step, fmt.Errorf("chunk %d/%d differs from the chunk already delivered: %w", i, n, ErrChunkMismatch))
		}
	}

	p := rs.open[step]
	p = cmp.Or(p, rs.ready[step])
	if p != nil {
		if p.n != n {
			return nil, a.reject(pos, run, step, fmt.Errorf("chunk %d/%d, but the step's chunk set (record %s) has %d chunks: %w", i, n, p.first(), p.n, ErrChunkMismatch))
		}
		if c := p.chunks[i]; c.ok {
			if c.sum == sum {
				return nil, a.duplicate(pos)
			}
			return nil, a.reject(pos, run, step, fmt.Errorf("chunk %d/%d differs from its copy at %s: %w", i, n, c.pos, ErrChunkMismatch))
		}
	}
	rows, err := decodeChunk(rec, run, step)
	if err != nil {
		return nil, a.reject(pos, run, step, err)
	}
	if p == nil {
		p = &partial{n: n, chunks: make([]chunk, n)}
		rs.open[step] = p
	}
	p.chunks[i] = chunk{ok: true, sum: sum, rows: rows, pos: pos}
	p.have++
	a.offsets.Hold(pos)
	if p.have == p.n {
		delete(rs.open, step)
		rs.ready[step] = p
	}
	return a.deliver(run, rs)
}

// SkipBatch records a record batch the consumer skipped unread (it decompresses past the
// consumer's limit; see internal/oversize): last is its last record, which counts as consumed so
// the next commit passes the batch.
func (a *Assembler) SkipBatch(last Pos) {
	a.offsets.Consumed(last)
	a.stats.SkippedBatches++
}

func (a *Assembler) duplicate(pos Pos) []error {
	a.offsets.Consumed(pos)
	a.stats.Duplicates++
	return nil
}

func (a *Assembler) reject(pos Pos, run string, step int64, err error) []error {
	a.offsets.Consumed(pos)
	a.stats.Skipped++
	return []error{&RecordError{Pos: pos, Run: run, Step: step, Err: err}}
}

func (a *Assembler) run(run string) *runState {
	rs := a.runs[run]
	if rs == nil {
		rs = &runState{
			open: make(map[int64]*partial), ready: make(map[int64]*partial), delivered: -1,
			sums: make(map[int64]chunkSums), parts: make(map[topicPartition]struct{}),
		}
		a.runs[run] = rs
	}
	return rs
}

// deliver hands out ready steps in step order; a ready step waits while a lower step is open,
// unless more than MaxBufferedSteps are waiting, in which case the lower open steps are abandoned.
func (a *Assembler) deliver(run string, rs *runState) ([]*Step, []error) {
	var out []*Step
	var errs []error
	for len(rs.ready) > 0 {
		next := slices.Min(slices.Collect(maps.Keys(rs.ready)))
		if len(rs.open) > 0 && slices.Min(slices.Collect(maps.Keys(rs.open))) < next {
			if len(rs.ready) <= a.cfg.MaxBufferedSteps {
				break
			}
			for _, s := range slices.Sorted(maps.Keys(rs.open)) {
				if s > next {
					break
				}
				p := rs.open[s]
				errs = append(errs, &RecordError{Pos: p.first(), Run: run, Step: s, Err: fmt.Errorf(
					"%d of %d chunks after %d later steps completed: %w", p.have, p.n, len(rs.ready), ErrAbandoned)})
				a.offsets.Release(p.positions()...)
				delete(rs.open, s)
				a.stats.Abandoned++
			}
		}
		p := rs.ready[next]
		delete(rs.ready, next)
		st := p.step(run, next)
		rs.delivered = next
		sums := make(chunkSums, p.n)
		for i := range p.chunks {
			sums[i] = p.chunks[i].sum
		}
		rs.sums[next] = sums
		rs.sumOrder = append(rs.sumOrder, next)
		if len(rs.sumOrder) > deliveredMemory {
			delete(rs.sums, rs.sumOrder[0])
			rs.sumOrder = rs.sumOrder[1:]
		}
		a.stats.Steps++
		a.stats.Rows += int64(len(st.Rows))
		out = append(out, st)
	}
	return out, errs
}

// Incomplete reports every step that is still missing chunks or waiting behind one, as
// *RecordError wrapping ErrIncomplete; a bounded read uses it to refuse a partial result.
func (a *Assembler) Incomplete() []error {
	var errs []error
	for _, run := range slices.Sorted(maps.Keys(a.runs)) {
		rs := a.runs[run]
		for _, s := range slices.Sorted(maps.Keys(rs.open)) {
			p := rs.open[s]
			errs = append(errs, &RecordError{Pos: p.first(), Run: run, Step: s, Err: fmt.Errorf("%d of %d chunks present: %w", p.have, p.n, ErrIncomplete)})
		}
		for _, s := range slices.Sorted(maps.Keys(rs.ready)) {
			p := rs.ready[s]
			errs = append(errs, &RecordError{Pos: p.first(), Run: run, Step: s, Err: fmt.Errorf("complete but waiting behind an incomplete earlier step: %w", ErrIncomplete)})
		}
	}
	return errs
}

// DropPartition forgets what was read from a partition (it was revoked in a rebalance): chunks
// read there are dropped and their holds released, so the partition's next owner, or this
// consumer after a re-assignment, reads them again from the committed offset. Chunks and holds
// on partitions still assigned are kept, so a run that spans partitions never has a record
// there become committable without being delivered. A run left with no partition loses its
// delivery history too and starts cleanly.
func (a *Assembler) DropPartition(topic string, partition int32) {
	tp := topicPartition{topic, partition}
	for run, rs := range a.runs {
		if _, ok := rs.parts[tp]; !ok {
			continue
		}
		delete(rs.parts, tp)
		for _, m := range []map[int64]*partial{rs.open, rs.ready} {
			for s, p := range m {
				if p.dropPartition(tp) == 0 {
					delete(m, s)
				}
			}
		}
		// A ready step that lost chunks is open again.
		for s, p := range rs.ready {
			if p.have < p.n {
				delete(rs.ready, s)
				rs.open[s] = p
			}
		}
		if len(rs.parts) == 0 {
			delete(a.runs, run)
		}
	}
	a.offsets.Forget(topic, partition)
}

// dropPartition removes the chunks read from tp and returns how many chunks remain. Their holds
// need no release: Offsets.Forget drops the partition's holds as a whole.
func (p *partial) dropPartition(tp topicPartition) int {
	for i, c := range p.chunks {
		if c.ok && c.pos.Topic == tp.topic && c.pos.Partition == tp.partition {
			p.chunks[i] = chunk{}
			p.have--
		}
	}
	return p.have
}

func (p *partial) first() Pos {
	for _, c := range p.chunks {
		if c.ok {
			return c.pos
		}
	}
	return Pos{}
}

func (p *partial) positions() []Pos {
	var ps []Pos
	for _, c := range p.chunks {
		if c.ok {
			ps = append(ps, c.pos)
		}
	}
	return ps
}

func (p *partial) step(run string, step int64) *Step {
	total := 0
	for _, c := range p.chunks {
		total += len(c.rows)
	}
	st := &Step{Run: run, Step: step, Rows: make([]topics.AdvantageRow, 0, total), Records: make([]Pos, p.n)}
	for i, c := range p.chunks {
		st.Rows = append(st.Rows, c.rows...)
		st.Records[i] = c.pos
	}
	return st
}

// parseHeaders reads run, step and chunk i/n; run and step are returned as far as they parsed
// ("" and -1 otherwise) so the error can name them.
func parseHeaders(rec *kgo.Record) (run string, step int64, i, n int, err error) {
	step = -1
	if v, ok := topics.HeaderValue(rec.Headers, topics.HeaderSchema); ok && !topics.IsAdvantageSchema(v) {
		return "", step, 0, 0, fmt.Errorf("header %s %q, want %q or %q: %w", topics.HeaderSchema, v, topics.SchemaAdvantages, topics.SchemaAdvantagesV2, topics.ErrUnknownSchema)
	}
	run, ok := topics.HeaderValue(rec.Headers, topics.HeaderRun)
	if !ok || !topics.ValidID(run) {
		return "", step, 0, 0, fmt.Errorf("header %s %q missing or not a valid id: %w", topics.HeaderRun, run, topics.ErrBadHeader)
	}
	if len(rec.Key) > 0 && string(rec.Key) != run {
		return run, step, 0, 0, fmt.Errorf("key %q differs from header %s %q: %w", rec.Key, topics.HeaderRun, run, topics.ErrBadHeader)
	}
	sv, ok := topics.HeaderValue(rec.Headers, topics.HeaderStep)
	if !ok {
		return run, step, 0, 0, fmt.Errorf("header %s missing: %w", topics.HeaderStep, topics.ErrBadHeader)
	}
	s, err := topics.ParseStep(sv)
	if err != nil {
		return run, step, 0, 0, err
	}
	cv, ok := topics.HeaderValue(rec.Headers, topics.HeaderChunk)
	if !ok {
		return run, s, 0, 0, fmt.Errorf("header %s missing: %w", topics.HeaderChunk, topics.ErrBadHeader)
	}
	i, n, err = topics.ParseChunk(cv)
	if err != nil {
		return run, s, 0, 0, err
	}
	return run, s, i, n, nil
}

// decodeChunk decodes the payload (schema version included) and checks it against the headers.
func decodeChunk(rec *kgo.Record, run string, step int64) ([]topics.AdvantageRow, error) {
	rows, err := topics.DecodeAdvantageRecord(rec)
	if err != nil {
		return nil, err
	}
	if v, ok := topics.HeaderValue(rec.Headers, topics.HeaderRows); ok {
		if want, perr := strconv.Atoi(v); perr != nil || want != len(rows) {
			return nil, fmt.Errorf("header %s %q, payload has %d rows: %w", topics.HeaderRows, v, len(rows), topics.ErrConflict)
		}
	}
	for j := range rows {
		if rows[j].RunID != run || rows[j].Step != step {
			return nil, fmt.Errorf("row %d is run %s step %d, headers say run %s step %d: %w", j, rows[j].RunID, rows[j].Step, run, step, topics.ErrConflict)
		}
	}
	return rows, nil
}
