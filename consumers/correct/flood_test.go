package correct

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// The flood limits on the engine: with --max-active-runs 3 and --max-held-dead-letters 2, ten
// never-completing runs on one partition leave 3 runs, 2 single dead letters and one aggregate
// of the 5 others (too-many-runs, by reference, their offset range); a record refused for another
// reason leaves no run behind; the aggregate waits while the holdback lies inside its range and
// lowers the holdback to its first offset meanwhile.
func TestEngineFloodLimits(t *testing.T) {
	e := testEngine(t, defaultCorr())
	e.limits.ActiveRuns, e.limits.HeldDeadLetters = 3, 2
	steps := testNames.Steps()
	for i := range 10 {
		r := manifestRecord(t, "f"+strconv.Itoa(i), 1, 1, 1)
		r.Key, r.Partition, r.Offset = []byte("f"+strconv.Itoa(i)), 0, int64(i)
		e.add(context.Background(), r, time.Now())
	}
	if len(e.runs) != 3 || e.heldDeadLetters() != 2 || e.pendingOverflow() != 5 || e.runsRefused != 7 || e.aggregated != 5 {
		t.Fatalf("%d runs, %d held, %d folded (%d refused, %d aggregated); want 3, 2, 5", len(e.runs), e.heldDeadLetters(),
			e.pendingOverflow(), e.runsRefused, e.aggregated)
	}

	// The buffered step of f0 (offset 0) holds the partition: nothing is written, and the holdback
	// stays at 0, below the aggregate's first offset 5.
	hold := e.holdback()
	if dls := e.takeDeadLetters(hold); len(dls) != 0 || hold[tp{steps, 0}].off != 0 {
		t.Fatalf("%d dead letters written, holdback %+v; want none and 0", len(dls), hold[tp{steps, 0}])
	}
	// A holdback inside the aggregate's range [5, 9] is lowered to 5 (the single dead letters below
	// it, offsets 3 and 4, are written); one past the range releases the aggregate.
	for _, c := range []struct {
		hold, want int64
		written    int
	}{{7, 5, 2}, {10, 10, 1}} {
		h := map[tp]offEpoch{{steps, 0}: {off: c.hold}}
		dls := e.takeDeadLetters(h)
		if len(dls) != c.written || h[tp{steps, 0}].off != c.want {
			t.Fatalf("holdback %d: %d dead letters, holdback now %d; want %d and %d", c.hold, len(dls), h[tp{steps, 0}].off, c.written, c.want)
		}
		for _, r := range dls {
			d, err := topics.ParseDeadLetter(r)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := topics.HeaderValue(r.Headers, HeaderDLQRecords)
			switch d.Reason {
			case reasonTooManyRuns:
			case reasonHeldExceeded:
				if d.SourceOffset != 5 || d.SourceEndOffset != 10 || n != "5" || r.Key != nil || r.Value != nil {
					t.Errorf("aggregate: offsets [%d, %d), %s records, key %q; want [5, 10), 5, none", d.SourceOffset, d.SourceEndOffset, n, r.Key)
				}
			default:
				t.Errorf("dead letter reason %s", d.Reason)
			}
		}
	}

	// A manifest of a new run refused for its size leaves no run behind.
	e.limits.ActiveRuns, e.limits.StepGroups = 0, 1
	big := manifestRecord(t, "big", 1, 2, 1)
	big.Key, big.Offset = []byte("big"), 10
	e.add(context.Background(), big, time.Now())
	if _, ok := e.runs["big"]; ok || len(e.runs) != 3 {
		t.Errorf("runs %d (big held: %v) after a refused manifest of a new run; want 3 and none", len(e.runs), ok)
	}
}
