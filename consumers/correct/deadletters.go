package correct

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// deadLetter is a dead letter waiting for the transaction that commits past its source offset.
type deadLetter struct {
	off int64
	rec *kgo.Record
}

func (e *engine) deadLetter(rec *kgo.Record, k kind, err error) {
	key := tp{rec.Topic, rec.Partition}
	refusals := e.undeliverable[key][rec.Offset]
	if refusals >= 2 { // refused even without value and headers: skip the record (see markUndeliverable)
		e.m.record(k, resultUndeliverable)
		return
	}
	if e.fold(key, rec.Offset, topics.Reason(err)) {
		e.deadLettered++
		e.m.record(k, resultDLQ)
		return
	}
	// Refused once: send it without value and source headers.
	e.dlq[key] = append(e.dlq[key], deadLetter{off: rec.Offset, rec: e.heldDeadLetter(rec, err, refusals == 1)})
	e.deadLettered++
	e.m.record(k, resultDLQ)
}

// markUndeliverable notes that the dead letter of the record at src/off was refused for good
// (stage.Undeliverable) and returns how often: when the record is judged again after the abort
// that refusal caused, its dead letter is sent without value and source headers
// (DeadLetterWriter.Minimal) after one refusal and the record is skipped after two, so one record
// costs at most two aborted transactions per process instead of an abort loop. The set survives
// reset (it is about input, not state) and is not persisted: after a restart the record costs the
// same again. It only grows on a DLQ topic configured below the bounded dead-letter size.
func (e *engine) markUndeliverable(src tp, off int64) int {
	if e.undeliverable[src] == nil {
		e.undeliverable[src] = map[int64]int{}
	}
	e.undeliverable[src][off]++
	return e.undeliverable[src][off]
}

// refusedDeadLetter is a dead letter the broker or client refused for good, and why.
type refusedDeadLetter struct {
	src  tp
	off  int64
	size int // key, value and headers
	err  error
}

// refused reads the source of a dead letter produced by this consumer whose produce failed with
// an error no retry can fix; ok is false for other records and errors.
func (c *Consumer) refused(r *kgo.Record, err error) (refusedDeadLetter, bool) {
	if r.Topic != c.cfg.Names.DLQ() || !stage.Undeliverable(err) {
		return refusedDeadLetter{}, false
	}
	d, perr := topics.ParseDeadLetter(r)
	if perr != nil {
		return refusedDeadLetter{}, false
	}
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	return refusedDeadLetter{src: tp{d.SourceTopic, d.SourcePartition}, off: d.SourceOffset, size: size, err: err}, true
}

// skipRefused escalates the largest refused dead letter (see markUndeliverable): minimal next
// time, or, refused as such, its source skipped with an error log line and
// wmrl_correct_dead_letters_undeliverable_total. Only one per abort: the broker refuses a whole
// batch when it is too large, so the small dead letters batched with a large one fail with it
// and must get their chance in the redo. Each abort still escalates one record, so a DLQ that
// refuses everything cannot loop either.
func (c *Consumer) skipRefused(rs []refusedDeadLetter) {
	if len(rs) == 0 {
		return
	}
	r := slices.MaxFunc(rs, func(a, b refusedDeadLetter) int { return a.size - b.size })
	args := []any{"topic", r.src.topic, "partition", r.src.part, "offset", r.off, "dead_letter_bytes", r.size,
		"refused_in_transaction", len(rs), "err", r.err}
	if c.eng.markUndeliverable(r.src, r.off) == 1 {
		c.log.Warn("dead letter refused by Kafka; it will be sent without value and source headers", args...)
		return
	}
	c.m.dlqRefused.Inc()
	c.log.Error("dead letter refused by Kafka even without value and headers; its source record will be skipped without one", args...)
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", topics.ErrConflict, fmt.Sprintf(format, args...))
}

// holdback returns, per input topic partition, the oldest record of any unsealed step: offsets
// may be committed up to it and no further, or a crash would lose buffered inputs.
func (e *engine) holdback() map[tp]offEpoch {
	out := map[tp]offEpoch{}
	for _, rb := range e.runs {
		if rb.end != nil { // the end-of-run record is needed until the run is retired
			key := tp{kindStep.topic(e.names), rb.part}
			if cur, ok := out[key]; !ok || rb.end.off.off < cur.off {
				out[key] = rb.end.off
			}
		}
		for _, b := range rb.steps {
			for k := kind(0); k < numKinds; k++ {
				if !b.hasOff[k] {
					continue
				}
				key := tp{k.topic(e.names), rb.part}
				if cur, ok := out[key]; !ok || b.minOff[k].off < cur.off {
					out[key] = b.minOff[k]
				}
			}
		}
	}
	return out
}

// takeDeadLetters removes and returns the pending dead letters whose source offset lies below
// the holdback of its partition. Producing them in the transaction that commits past their
// source makes dead-lettering exactly-once: a restart re-reads (and re-judges) exactly the
// records whose dead letters were not committed.
//
// Aggregated dead letters (flood.go) are taken first: one that must wait lowers its partition's
// holdback in hold to its first offset, which keeps the single dead letters after it waiting too
// and is the offset the transaction commits.
func (e *engine) takeDeadLetters(hold map[tp]offEpoch) []*kgo.Record {
	out := e.takeOverflows(hold)
	for _, key := range slices.SortedFunc(maps.Keys(e.dlq), cmpTP) {
		pending := e.dlq[key]
		h, held := hold[key]
		keep := pending[:0]
		for _, d := range pending {
			if held && d.off >= h.off {
				keep = append(keep, d)
				continue
			}
			out = append(out, d.rec)
			e.dlqBytes -= stage.RecordBytes(d.rec)
		}
		if len(keep) == 0 {
			delete(e.dlq, key)
		} else {
			e.dlq[key] = keep
		}
	}
	return out
}
