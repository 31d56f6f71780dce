package stage

import (
	"slices"
	"sync"
)

// tp names one partition of one topic.
type tp struct {
	topic     string
	partition int32
}

// partState tracks the offsets of one partition that were dispatched but have not finished.
type partState struct {
	inflight map[int64]int32 // offset → leader epoch of the record
	// held are records handed back on shutdown: they never finish here, and they keep the commit
	// point below them so the next owner processes them.
	held map[int64]int32
	// next is one past the highest offset dispatched so far: the commit point once nothing
	// below it is in flight.
	next  int64
	epoch int32
}

// tracker lets handlers finish in any order while offsets are committed only below the lowest
// unfinished record, so a crash never skips a record that was still being processed.
type tracker struct {
	mu    sync.Mutex
	cond  *sync.Cond
	parts map[tp]*partState
	// committed is the last committed offset per partition, to skip no-op commits.
	committed map[tp]int64
}

func newTracker() *tracker {
	t := &tracker{parts: map[tp]*partState{}, committed: map[tp]int64{}}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// assign starts tracking newly assigned partitions.
func (t *tracker) assign(assigned map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range assigned {
		for _, p := range ps {
			k := tp{topic, p}
			if _, ok := t.parts[k]; !ok {
				t.parts[k] = &partState{inflight: map[int64]int32{}, held: map[int64]int32{}, next: -1, epoch: -1}
			}
		}
	}
}

// start registers a dispatched record; false means the partition is no longer ours and the
// record must be dropped (its new owner will read it again).
func (t *tracker) start(topic string, partition int32, offset int64, epoch int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[tp{topic, partition}]
	if !ok {
		return false
	}
	ps.inflight[offset] = epoch
	if offset+1 > ps.next {
		ps.next = offset + 1
		ps.epoch = epoch
	}
	return true
}

// finish marks a record done. A record handed back on shutdown is not finished, so its offset
// stays uncommitted.
func (t *tracker) finish(topic string, partition int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ps, ok := t.parts[tp{topic, partition}]; ok {
		delete(ps.inflight, offset)
	}
	t.cond.Broadcast()
}

// handBack marks a record as not processed: it leaves the in-flight set but still bounds the
// commit point, so it is redelivered after a restart or rebalance.
func (t *tracker) handBack(topic string, partition int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ps, ok := t.parts[tp{topic, partition}]; ok {
		if epoch, ok := ps.inflight[offset]; ok {
			delete(ps.inflight, offset)
			ps.held[offset] = epoch
		}
	}
	t.cond.Broadcast()
}

// wake lets waitIdle re-check its stop condition.
func (t *tracker) wake() {
	t.mu.Lock()
	t.cond.Broadcast()
	t.mu.Unlock()
}

// commitPoint returns the offset to commit for one partition — the lowest unfinished offset, or
// next when everything dispatched has finished; -1 when nothing was dispatched — with the leader
// epoch of the record at that offset, so the broker can detect a truncated log.
func (ps *partState) commitPoint() (int64, int32) {
	low, epoch := ps.next, ps.epoch
	for _, set := range []map[int64]int32{ps.inflight, ps.held} {
		for o, e := range set {
			if o < low {
				low, epoch = o, e
			}
		}
	}
	return low, epoch
}

// committable returns the commit points that moved since the last commit.
func (t *tracker) committable(only map[string][]int32) map[string]map[int32]commitAt {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]map[int32]commitAt{}
	for k, ps := range t.parts {
		if only != nil && !slices.Contains(only[k.topic], k.partition) {
			continue
		}
		at, epoch := ps.commitPoint()
		if at < 0 || at == t.committed[k] {
			continue
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]commitAt{}
		}
		out[k.topic][k.partition] = commitAt{offset: at, epoch: epoch}
	}
	return out
}

// committedAt records a successful commit.
func (t *tracker) committedAt(c map[string]map[int32]commitAt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range c {
		for p, at := range ps {
			// A partition revoked while its commit was in flight stays forgotten.
			if _, owned := t.parts[tp{topic, p}]; owned {
				t.committed[tp{topic, p}] = at.offset
			}
		}
	}
}

// inflight counts records in flight on the given partitions (all when nil).
func (t *tracker) inflight(only map[string][]int32) int {
	n := 0
	for k, ps := range t.parts {
		if only == nil || slices.Contains(only[k.topic], k.partition) {
			n += len(ps.inflight)
		}
	}
	return n
}

// waitIdle blocks until no record is in flight on the partitions, or until stop returns true.
func (t *tracker) waitIdle(only map[string][]int32, stop func() bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.inflight(only) > 0 && !stop() {
		t.cond.Wait()
	}
}

// revoke stops tracking partitions; records still dispatched for them are finished into nothing.
func (t *tracker) revoke(revoked map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range revoked {
		for _, p := range ps {
			delete(t.parts, tp{topic, p})
			delete(t.committed, tp{topic, p})
		}
	}
	t.cond.Broadcast()
}

type commitAt struct {
	offset int64
	epoch  int32
}
