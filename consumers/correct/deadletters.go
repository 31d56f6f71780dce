package correct

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/topics"
)

// deadLetter is a dead letter waiting for the transaction that commits past its source offset.
type deadLetter struct {
	off int64
	rec *kgo.Record
}

func (e *engine) deadLetter(rec *kgo.Record, k kind, err error) {
	key := tp{rec.Topic, rec.Partition}
	e.dlq[key] = append(e.dlq[key], deadLetter{off: rec.Offset, rec: e.dlqw.Record(rec, err)})
	e.deadLettered++
	e.m.record(k, resultDLQ)
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", topics.ErrConflict, fmt.Sprintf(format, args...))
}

// holdback returns, per input topic partition, the oldest record of any unsealed step: offsets
// may be committed up to it and no further, or a crash would lose buffered inputs.
func (e *engine) holdback() map[tp]offEpoch {
	out := map[tp]offEpoch{}
	for _, rb := range e.runs {
		for _, b := range rb.steps {
			for k := kind(0); k < numKinds; k++ {
				if !b.hasOff[k] {
					continue
				}
				key := tp{e.topic(k), rb.part}
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
func (e *engine) takeDeadLetters(hold map[tp]offEpoch) []*kgo.Record {
	var out []*kgo.Record
	for _, key := range slices.SortedFunc(maps.Keys(e.dlq), func(a, b tp) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.part) - int(b.part)
	}) {
		pending := e.dlq[key]
		h, held := hold[key]
		keep := pending[:0]
		for _, d := range pending {
			if held && d.off >= h.off {
				keep = append(keep, d)
				continue
			}
			out = append(out, d.rec)
		}
		if len(keep) == 0 {
			delete(e.dlq, key)
		} else {
			e.dlq[key] = keep
		}
	}
	return out
}
