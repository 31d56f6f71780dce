package correct

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// An ended run in the changelog and in Redis, its retention and how it is forgotten:
// docs/design-notes.md, "Ended runs".

// endedRun is a retired run as the engine keeps it.
type endedRun struct {
	end  topics.CalibrationEnd
	part int32
	// streams maps each stream to the number of changelog chunk slots it used, whose keys are
	// tombstoned after the retention; nil once they are.
	streams    map[string]int
	tombstoned bool
}

// changelogSlots returns, per stream of a run's states, the chunk slots its changelog used: the
// chunks its pairs ever fell into, at most the slots of its window.
func changelogSlots(states map[string]*correction.State) map[string]int {
	out := make(map[string]int, len(states))
	for s, st := range states {
		used := (st.TotalPairs() + correction.ChunkPairs - 1) / correction.ChunkPairs
		out[s] = int(min(used, uint64(correction.ChunkSlots(st.Config().Window))))
	}
	return out
}

// installEnded records a run the changelog says has ended; its states are not installed.
func (e *engine) installEnded(end topics.CalibrationEnd, part int32, streams map[string]int) {
	e.ended[end.RunID] = &endedRun{end: end, part: part, streams: streams}
}

// lifecycleEvery is how often the consumer checks the ended-run retention and the idle timeout.
const lifecycleEvery = time.Second

// expireEnded queues the tombstones of the runs that ended retention or more before now, and
// forgets the runs tombstoned a retention ago. retention 0 keeps ended runs for ever.
func (e *engine) expireEnded(now time.Time, retention time.Duration) {
	if retention <= 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(e.ended)) {
		er := e.ended[id]
		age := now.Sub(er.end.EndedAt)
		switch {
		case !er.tombstoned && age >= retention:
			er.tombstoned = true
			e.pendTombs = append(e.pendTombs, er)
		case er.tombstoned && age >= 2*retention:
			delete(e.ended, id)
		}
	}
}

// changelogOut is what the next transaction writes to the calibration changelog besides the
// sealed steps' records, and the runs it concerns (for Redis after the commit).
type changelogOut struct {
	recs []*kgo.Record
	// ends are the runs retired since the last take, with their ends; tombed the runs tombstoned.
	ends   []topics.CalibrationEnd
	tombed []string
	// idle counts the idle end-of-run records among recs (for the steps topic, idle.go).
	idle int
}

// takeChangelog returns the end records and tombstones queued since the last call, each on its
// run's partition: per tombstoned run its streams' chunk slots, then snapshots, then its end.
func (e *engine) takeChangelog() (changelogOut, error) {
	var out changelogOut
	for _, er := range e.pendEnds {
		r, err := e.names.CalibrationEndRecord(er.end)
		if err != nil {
			return changelogOut{}, fmt.Errorf("end record of run %s: %w", er.end.RunID, err)
		}
		r.Partition = er.part
		out.recs = append(out.recs, r)
		out.ends = append(out.ends, er.end)
	}
	for _, er := range e.pendTombs {
		run := er.end.RunID
		tomb := func(key []byte) {
			r := e.names.CalibrationTombstone(key)
			r.Partition = er.part
			out.recs = append(out.recs, r)
		}
		for _, s := range slices.Sorted(maps.Keys(er.streams)) {
			for slot := range er.streams[s] {
				tomb(topics.CalibrationChunkKey(run, s, slot))
			}
			tomb(topics.CalibrationKey(run, s))
		}
		tomb(topics.CalibrationEndKey(run))
		er.streams = nil
		out.tombed = append(out.tombed, run)
	}
	e.pendEnds, e.pendTombs = nil, nil
	idle := e.takeIdle()
	out.recs = append(out.recs, idle...)
	out.idle = len(idle)
	out.recs = append(out.recs, e.takeRelayed()...)
	return out, nil
}

// empty reports whether there is nothing to write.
func (o *changelogOut) empty() bool { return len(o.recs) == 0 }

// writeEnds records the ends of the runs a committed transaction retired in Redis and sets their
// keys' TTL to what is left of the retention, and expires the keys of the runs it tombstoned at
// once. Failures are logged and counted (Redis is a cache of the changelog here).
func (c *Consumer) writeEnds(out changelogOut) {
	if len(out.ends) == 0 && len(out.tombed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	retention := c.cfg.EndedRunRetention
	for _, end := range out.ends {
		re := statestore.RunEnd{LastStep: end.LastStep, EndedAt: end.EndedAt, Reason: end.Reason}
		err := c.store.RecordEnd(ctx, end.RunID, re)
		if err == nil && retention > 0 {
			err = c.store.ExpireRun(ctx, end.RunID, time.Until(end.EndedAt.Add(retention)))
		}
		if err != nil {
			c.m.redisErrors.Inc()
			c.log.Warn("redis: recording a run's end failed (the changelog has it)", "run", end.RunID, "err", err)
		}
	}
	for _, run := range out.tombed {
		if err := c.store.ExpireRun(ctx, run, time.Millisecond); err != nil {
			c.m.redisErrors.Inc()
			c.log.Warn("redis: expiring an ended run's keys failed", "run", run, "err", err)
		}
	}
}
