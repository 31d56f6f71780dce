package correct

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// Idle runs (Config.RunIdleTimeout, off by default: a trainer paused for a long evaluation or a
// checkpoint must not lose its run).
//
// A run with no input record for the timeout is ended by the instance owning it: it publishes the
// run's end-of-run record on the steps topic, on the run's partition, with header
// wmrl-end-reason: idle, inside its next transaction (the header is honoured only on a record of a
// transactional batch, i.e. correct's own: runend.go; why the steps topic: docs/design-notes.md); until
// it is read back nothing changes. The record names the run's last sealed step; buffered incomplete steps beyond
// it (a trainer that died mid-step) are dead-lettered run_ended when it arrives, as for a relayed
// end (runend.go addEnd). A duplicate (an instance that crashed
// after the commit and decides again) is a duplicate of the buffered end, or a sealed duplicate
// of the retired run: harmless. A run that sealed a later step between the decision and the
// record's arrival (input resumed) ignores it (result idle_end_ignored) and lives on.
//
// Known limits: a run that never sealed a step is not ended (an end needs a last step >= 0), so
// its buffered records keep holding its partition's commit back. An idle end racing a straggler
// that completes the next step can be judged differently by a replay, which interleaves the
// topics in its own order: choose a timeout far above any scoring delay.

// touch notes an input record of a run: it is not idle.
func (e *engine) touch(d decoded, now time.Time) {
	if rb := e.runs[d.run]; rb != nil {
		rb.lastInput, rb.idleSent = now, false
	}
}

// idleEnds queues the end-of-run record of every run without input for timeout (0: off) that has
// a sealed step and no end yet; each run is queued once until it has input again.
func (e *engine) idleEnds(now time.Time, timeout time.Duration) error {
	if timeout <= 0 {
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(e.runs)) {
		rb := e.runs[id]
		if rb.end != nil || rb.idleSent || rb.sealed < 0 || now.Sub(rb.lastInput) < timeout {
			continue
		}
		r, err := e.names.StepRecord(topics.EndOfRunMarker(id, rb.sealed, now.UTC()))
		if err != nil {
			return fmt.Errorf("idle end-of-run record of run %s: %w", id, err)
		}
		r.Headers = append(r.Headers, topics.Header(topics.HeaderEndReason, topics.EndReasonIdle))
		r.Partition = rb.part
		rb.idleSent = true
		e.pendIdle = append(e.pendIdle, r)
	}
	return nil
}

// takeIdle returns the idle end-of-run records queued since the last call.
func (e *engine) takeIdle() []*kgo.Record {
	out := e.pendIdle
	e.pendIdle = nil
	return out
}
