package correct

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// How a run ends (who may end it, why the end-of-run record goes on the steps topic, what becomes
// of later records, the known limits) is docs/design-notes.md, "How a run ends".

// reasonRunEnded is the dead-letter reason of records for steps beyond an ended run's last step.
const reasonRunEnded = "run_ended"

// runEndedError refuses a record of a step beyond its run's last step.
type runEndedError struct {
	run        string
	step, last int64
}

func (e *runEndedError) Error() string {
	return fmt.Sprintf("run %s ended with step %d; a record for step %d comes after its end", e.run, e.last, e.step)
}

func (e *runEndedError) DLQReason() string { return reasonRunEnded }

// reasonEndUnauthorized is the dead-letter reason of an end-of-run record this consumer did not
// write (not in a transactional batch) and of an end request claiming the idle reason.
const reasonEndUnauthorized = "end_unauthorized"

// endUnauthorizedError refuses an end-of-run record from a principal that may not end runs.
type endUnauthorizedError struct {
	run, why string
}

func (e *endUnauthorizedError) Error() string {
	return fmt.Sprintf("end-of-run record of run %s refused: %s", e.run, e.why)
}

func (e *endUnauthorizedError) DLQReason() string { return reasonEndUnauthorized }

// fromTransaction reports whether rec came in a transactional batch. The broker accepts a
// transactional produce only from a principal with Write on the request's transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), and of the principals that may write the
// steps topic only correct's has one (docs/security.md), so on the steps topic this identifies
// correct's own records. The attribute is in the stored batch, so a replay sees the same.
func fromTransaction(rec *kgo.Record) bool { return rec.Attrs.IsTransactional() }

// resultRelayed counts end requests of the run-control topic queued for relaying.
const resultRelayed = "relayed"

// relayEnd takes a record of the run-control topic: a valid end request is queued for the steps
// topic as the canonical end-of-run record (on the request's partition number: the topics are
// co-partitioned and both keyed by run) and produced in the next transaction, which commits the
// request's offset too. A request that is
// not an end-of-run record, is keyed by another run or claims the idle reason is dead-lettered.
// Whether the end is plausible for the run is judged when the relayed record is read back
// (addEnd), in the order of the steps partition, as a replay judges it.
func (e *engine) relayEnd(rec *kgo.Record) {
	// The run-control topic has no registered schema (topics.Names.Framed): a framed value on it
	// is decoded past its frame without asking a registry, so an unreachable registry cannot
	// stall the apply loop here, and live and replay judge it alike.
	names := e.names
	names.Registry = nil
	m, err := names.DecodeStepRecord(context.Background(), rec)
	switch {
	case err != nil:
	case !m.EndOfRun:
		err = &topics.FieldError{Record: "end request", Field: "end_of_run", Value: "false",
			Reason: "the run-control topic takes end-of-run records only", Err: topics.ErrInvalid}
	case string(rec.Key) != m.RunID:
		err = &topics.FieldError{Record: "end request", Field: "key", Value: string(rec.Key),
			Reason: fmt.Sprintf("must equal run_id %q: records are partitioned by run", m.RunID), Err: topics.ErrInvalid}
	default:
		if v, ok := topics.HeaderValue(rec.Headers, topics.HeaderEndReason); ok {
			err = &endUnauthorizedError{run: m.RunID, why: fmt.Sprintf("an end request may not carry %s: %q (only wmrl correct ends a run as idle)", topics.HeaderEndReason, v)}
		}
	}
	if err != nil {
		e.deadLetter(rec, kindStep, err)
		e.judgedRequest(rec, m.Step, err)
		return
	}
	// Re-encoded rather than copied: the relay is the canonical record, small whatever headers or
	// padding the request carried, so the steps topic cannot refuse it and abort the transaction.
	r, err := e.names.StepRecord(topics.EndOfRunMarker(m.RunID, m.Step, m.CreatedAt))
	if err != nil {
		e.deadLetter(rec, kindStep, err)
		e.judgedRequest(rec, m.Step, err)
		return
	}
	r.Partition = rec.Partition
	r.Headers = append(r.Headers, topics.Header(topics.HeaderEndRequest, topics.EndRequestID(rec.Topic, rec.Partition, rec.Offset)))
	e.pendRelay = append(e.pendRelay, r)
	e.m.records.WithLabelValues("runs", resultRelayed).Inc() // its dead letters count under "steps"
}

// takeRelayed returns the relayed end requests queued since the last call.
func (e *engine) takeRelayed() []*kgo.Record {
	out := e.pendRelay
	e.pendRelay = nil
	return out
}

// highestShown is the highest step run rb has shown: sealed, or with a buffered manifest.
func (rb *runBuf) highestShown() int64 {
	h := rb.sealed
	for v, b := range rb.steps {
		if b.manifest != nil && v > h {
			h = v
		}
	}
	return h
}

// runEnd is a run's buffered end-of-run record.
type runEnd struct {
	last   int64
	off    offEpoch  // of the marker: held back until the run is retired
	at     time.Time // the marker's created_at: the ended-run retention counts from it
	reason string    // topics.EndReasonMarker or EndReasonIdle
}

// endedRecord judges a record of a retired run; it reports false when run is not retired.
func (e *engine) endedRecord(rec *kgo.Record, k kind, run string, step int64) bool {
	er, ok := e.ended[run]
	if !ok {
		return false
	}
	if last := er.end.LastStep; step <= last {
		e.m.record(k, resultSealed)
		return true
	}
	e.deadLetter(rec, k, &runEndedError{run: run, step: step, last: er.end.LastStep})
	return true
}

// addEnd takes a run's end-of-run record. One the consumer published itself for an idle run
// (reason idle, idle.go) never is a conflict: it ends a run where it stands or, if the run has
// moved on or ended since, is ignored.
func (e *engine) addEnd(rec *kgo.Record, m topics.StepManifest) {
	if !e.relayed(rec) {
		e.refuseEnd(rec, m, &endUnauthorizedError{run: m.RunID,
			why: fmt.Sprintf("not written by wmrl correct (not in a transactional batch); publish the end on %s (wmrl runs end)", e.names.Runs())})
		return
	}
	idle := endReason(rec) == topics.EndReasonIdle
	// A marker for a run without a manifest before it (a typo in `wmrl runs end`, a run keyed
	// elsewhere) would wait for steps that never come and hold the partition's commit back for
	// ever. Manifests share the marker's partition, so whether one came first is fixed by the
	// input order (a run restored from the changelog has sealed steps, which count).
	if rb := e.runs[m.RunID]; rb == nil || (rb.sealed < 0 && !rb.hasManifest()) {
		if idle {
			e.m.record(kindStep, resultIdleIgnored)
			return
		}
		e.refuseEnd(rec, m, conflict("end-of-run record of run %s, which has no step manifest before it", m.RunID))
		return
	}
	rb, err := e.runFor(m.RunID, rec.Partition)
	if err != nil {
		e.refuseEnd(rec, m, err)
		return
	}
	window := int64(e.limits.PendingStepsPerRun)
	switch h := rb.highestShown(); {
	case m.Step > h && m.Step-h > window:
		// Subtraction, not h+window: a step near 2^63 must not overflow into plausibility.
		e.refuseEnd(rec, m, conflict("end-of-run record of run %s names step %d as the last, more than %d steps (the pending-steps limit per run) beyond the highest step %d the run has shown",
			m.RunID, m.Step, window, h))
		return
	case rb.end != nil && rb.end.last == m.Step:
		e.m.record(kindStep, resultDuplicate)
		e.judgedEnd(rec, m, nil)
		return
	case idle && (rb.end != nil || m.Step < rb.sealed):
		// The run ended otherwise, or sealed more steps after the idle decision: it lives on.
		e.m.record(kindStep, resultIdleIgnored)
		return
	case rb.end != nil:
		e.refuseEnd(rec, m, conflict("run %s already ended with step %d; this end-of-run record names step %d", m.RunID, rb.end.last, m.Step))
		return
	case m.Step < rb.sealed:
		e.refuseEnd(rec, m, conflict("end-of-run record of run %s names step %d as the last, but step %d is already sealed", m.RunID, m.Step, rb.sealed))
		return
	}
	// Records of later steps that came before the marker (manifests included: an end takes effect
	// where correct relays it, so another client's manifest published meanwhile may precede it):
	// dead-lettered as those after it will be.
	for _, v := range slices.Sorted(maps.Keys(rb.steps)) {
		if v <= m.Step {
			continue
		}
		b := rb.steps[v]
		if b.manRec != nil {
			e.deadLetter(b.manRec, kindStep, &runEndedError{run: m.RunID, step: v, last: m.Step})
		}
		for _, k := range []kind{kindPredicted, kindExecuted} {
			rewards := b.pred
			if k == kindExecuted {
				rewards = b.exec
			}
			for _, gid := range slices.Sorted(maps.Keys(rewards)) {
				for _, id := range rewards[gid].order {
					e.deadLetter(rewards[gid].byID[id].rec, k, &runEndedError{run: m.RunID, step: v, last: m.Step})
				}
			}
		}
		delete(rb.steps, v)
		e.dropStep(b)
	}
	rb.end = &runEnd{last: m.Step, off: offEpoch{rec.Offset, rec.LeaderEpoch}, at: endTime(rec, m), reason: endReason(rec)}
	e.m.record(kindStep, resultBuffered)
	e.judgedEnd(rec, m, nil)
	e.retireIfDone(rb)
}

// hasManifest reports whether a manifest of the run is buffered.
func (rb *runBuf) hasManifest() bool {
	for _, b := range rb.steps {
		if b.manifest != nil {
			return true
		}
	}
	return false
}

// retireIfDone retires rb once its end is known and its last step sealed.
func (e *engine) retireIfDone(rb *runBuf) {
	if rb.end == nil || rb.sealed < rb.end.last {
		return
	}
	for _, b := range rb.steps { // none after the last step can be buffered; be safe anyway
		e.dropStep(b)
	}
	delete(e.runs, rb.id)
	er := &endedRun{
		end:     topics.CalibrationEnd{RunID: rb.id, LastStep: rb.end.last, EndedAt: rb.end.at, Reason: rb.end.reason},
		part:    rb.part,
		streams: changelogSlots(rb.states),
	}
	e.ended[rb.id] = er
	e.retired = append(e.retired, rb.id)
	e.pendEnds = append(e.pendEnds, er)
}

// endTime is when a run ended: its end-of-run record's created_at, else the record's timestamp.
// Milliseconds, as the changelog and Redis record it.
func endTime(rec *kgo.Record, m topics.StepManifest) time.Time {
	at := m.CreatedAt
	if at.IsZero() {
		at = rec.Timestamp
	}
	return time.UnixMilli(at.UnixMilli()).UTC()
}

// endReason is EndReasonIdle for a marker `wmrl correct --run-idle-timeout` published (header
// HeaderEndReason), EndReasonMarker for any other.
func endReason(rec *kgo.Record) string {
	if v, ok := topics.HeaderValue(rec.Headers, topics.HeaderEndReason); ok && v == topics.EndReasonIdle {
		return topics.EndReasonIdle
	}
	return topics.EndReasonMarker
}

// takeRetired returns the runs retired since the last call.
func (e *engine) takeRetired() []string {
	out := e.retired
	e.retired = nil
	return out
}

// activeRuns counts the runs held in memory.
func (e *engine) activeRuns() int { return len(e.runs) }

// Per-state terms of stateBytes: a window pair is two float64s in the FIFO and again in the
// sorted copy the isotonic fit merges into; the head (counters, sums, the noise EWMA, ids) is a
// few hundred bytes.
const (
	stateBytesPerPair = 32
	stateBytesHead    = 256
)

// stateBytes estimates the bytes of the live (run, stream) states held in memory: 32 per window
// pair plus 256 per state. It leaves out the fit's breakpoints (at most one pair per distinct
// score) and the buffered, unsealed steps, so it is a lower bound that follows the states' count
// and window fill, which is what bounds memory by the active runs.
func (e *engine) stateBytes() int64 {
	var n int64
	for _, rb := range e.runs {
		for _, st := range rb.states {
			n += stateBytesHead + stateBytesPerPair*int64(st.Pairs())
		}
	}
	return n
}

// forgetRuns deletes the per-run metric series of retired runs; called after the transaction
// that sealed their last step committed (and so after observe set them a last time).
func (m *metrics) forgetRuns(runs []string) {
	vecs := append(m.streamVecs(), m.debias.vecs()...)
	for _, run := range runs {
		for _, g := range vecs {
			g.DeletePartialMatch(prometheus.Labels{"run": run})
		}
	}
}

// afterCommit finishes what a commit (or a poll without one) leaves: the retired runs' series go
// and the active-runs gauge is set.
func (c *Consumer) afterCommit() {
	c.m.forgetRuns(c.eng.takeRetired())
	c.m.activeRuns.Set(float64(c.eng.activeRuns()))
	c.m.stateBytes.Set(float64(c.eng.stateBytes()))
}
