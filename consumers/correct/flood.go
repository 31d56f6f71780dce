package correct

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// Floods: state bounded by configuration whatever arrives. Two per-instance limits (Limits.
// ActiveRuns, Limits.HeldDeadLetters) bound what a flood of distinct runs costs; 400,000 tiny
// never-completing manifests of distinct runs once took the consumer past 1.3 GB.
//
//   - A record of a run the instance does not hold yet is dead-lettered too-many-runs while
//     ActiveRuns runs are held; a record refused for any reason no longer leaves its new run
//     behind as an empty buffer (apply drops it).
//   - Dead letters wait in memory until the holdback passes their source (exactly-once), and a
//     never-completing step holds it for ever; once HeldDeadLetters wait, further dead letters of
//     a partition are folded into one dead letter by reference (reason dead-letters-exceeded,
//     HeaderDLQRecords of them between its source offset and HeaderDLQEndOffset, with their
//     reasons counted in its error text), so a flood costs a few hundred bytes per partition
//     instead of per record. Which offsets of the range were refused is not kept: the range is
//     for an operator to re-read.
//
// An aggregate is written exactly once like any dead letter: while it waits, the partition's
// committed offset stays at or below its first offset (takeDeadLetters lowers the holdback), so a
// restart re-reads and re-judges all of it; it is written by the transaction whose holdback
// passes its last offset.

// Reasons and header of the flood limits.
const (
	reasonTooManyRuns  = "too-many-runs"
	reasonHeldExceeded = "dead-letters-exceeded"
	// HeaderDLQRecords is the number of source records an aggregated dead letter stands for.
	HeaderDLQRecords = "wmrl-dlq-records"
)

// overflow is one partition's dead letters folded while HeldDeadLetters waited.
type overflow struct {
	first, last int64
	n           int
	reasons     map[string]int
}

// admitRun refuses a run the instance does not hold while it holds ActiveRuns runs.
func (e *engine) admitRun(id string) error {
	if n := e.limits.ActiveRuns; n > 0 && len(e.runs) >= n {
		e.runsRefused++
		e.m.runsRefused.Inc()
		return overLimit(reasonTooManyRuns, "run %s: the instance already holds %d active runs (limit %d, --max-active-runs)", id, len(e.runs), n)
	}
	return nil
}

// dropIfEmpty forgets a run that a refused record created: nothing buffered, sealed or ended.
func (e *engine) dropIfEmpty(id string) {
	if rb := e.runs[id]; rb != nil && rb.sealed < 0 && len(rb.steps) == 0 && len(rb.states) == 0 && rb.end == nil {
		delete(e.runs, id)
	}
}

// fold folds a dead letter of key at off into the partition's overflow when HeldDeadLetters
// already wait, reporting whether it did.
func (e *engine) fold(key tp, off int64, reason string) bool {
	if n := e.limits.HeldDeadLetters; n <= 0 || e.heldDeadLetters() < n {
		return false
	}
	ov := e.overflow[key]
	if ov == nil {
		ov = &overflow{first: off, last: off, reasons: map[string]int{}}
		e.overflow[key] = ov
	}
	ov.first, ov.last = min(ov.first, off), max(ov.last, off)
	ov.n++
	ov.reasons[reason]++
	e.aggregated++
	e.m.aggregated.Inc()
	return true
}

// takeOverflows returns the aggregates whose last offset lies below the holdback of their
// partition, and lowers the holdback of every partition whose aggregate must wait to its first
// offset, so that a commit never passes records of an unwritten aggregate (nil hold: no
// holdback, take all).
func (e *engine) takeOverflows(hold map[tp]offEpoch) []*kgo.Record {
	var out []*kgo.Record
	for _, key := range slices.SortedFunc(maps.Keys(e.overflow), cmpTP) {
		ov := e.overflow[key]
		if h, held := hold[key]; held && h.off <= ov.last {
			if ov.first < h.off {
				// The epoch of the holdback's record is a valid epoch for the lower offset too:
				// both lie in the same partition log, and the epoch only ever grows.
				hold[key] = offEpoch{off: ov.first, epoch: h.epoch}
			}
			continue
		}
		out = append(out, e.overflowRecord(key, ov))
		delete(e.overflow, key)
	}
	return out
}

// overflowRecord is the dead letter by reference of an aggregate.
func (e *engine) overflowRecord(key tp, ov *overflow) *kgo.Record {
	var why []string
	for _, r := range slices.Sorted(maps.Keys(ov.reasons)) {
		why = append(why, fmt.Sprintf("%s: %d", r, ov.reasons[r]))
	}
	err := overLimit(reasonHeldExceeded, "%d records of %s/%d between offsets %d and %d were refused (%s) while %d dead letters waited for their transaction (limit %d, --max-held-dead-letters); they are dead-lettered together, by reference",
		ov.n, key.topic, key.part, ov.first, ov.last, strings.Join(why, ", "), e.limits.HeldDeadLetters, e.limits.HeldDeadLetters)
	src := &kgo.Record{Topic: key.topic, Partition: key.part, Offset: ov.first, Timestamp: time.UnixMilli(0)}
	dl := e.dlqw.Minimal().Record(src, err)
	dl.Headers = append(dl.Headers,
		topics.Header(topics.HeaderDLQEndOffset, strconv.FormatInt(ov.last+1, 10)),
		topics.Header(HeaderDLQRecords, strconv.Itoa(ov.n)))
	return dl
}

// pendingOverflow counts the records in aggregates not yet written.
func (e *engine) pendingOverflow() int {
	n := 0
	for _, ov := range e.overflow {
		n += ov.n
	}
	return n
}

func cmpTP(a, b tp) int {
	if c := strings.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return int(a.part) - int(b.part)
}

// floodWarnEvery rate-limits the flood warning.
const floodWarnEvery = 10 * time.Second

// warnFlood logs, at most every floodWarnEvery, what the flood limits refused since the last
// line, with the running totals; loop only.
func (c *Consumer) warnFlood(now time.Time) {
	e := c.eng
	runs, agg := e.runsRefused-c.flood.runs, e.aggregated-c.flood.aggregated
	if (runs == 0 && agg == 0) || now.Sub(c.flood.at) < floodWarnEvery {
		return
	}
	c.flood.runs, c.flood.aggregated, c.flood.at = e.runsRefused, e.aggregated, now
	c.log.Warn("flood of input: records refused by the per-instance limits (dead-lettered too-many-runs; past --max-held-dead-letters folded into dead letters by reference)",
		"runs_refused", runs, "runs_refused_total", e.runsRefused, "active_runs", len(e.runs), "max_active_runs", e.limits.ActiveRuns,
		"dead_letters_aggregated", agg, "dead_letters_aggregated_total", e.aggregated, "dead_letters_held", e.heldDeadLetters(),
		"max_held_dead_letters", e.limits.HeldDeadLetters, "aggregated_pending", e.pendingOverflow())
}

// floodLog is the state of warnFlood: the totals at its last line.
type floodLog struct {
	at               time.Time
	runs, aggregated int
}
