package steps

// Offsets tracks, per partition, how far a consumer has read and which records are still held by
// unfinished work (incomplete steps, steps not yet acknowledged, rows not yet in a closed file).
// A consumer may commit a partition only up to its oldest held record: committing further would
// lose that record on a restart. The zero value is not usable; use NewOffsets.
type Offsets struct {
	parts map[topicPartition]*partOffsets
}

type topicPartition struct {
	topic     string
	partition int32
}

type partOffsets struct {
	next      int64         // one past the highest offset consumed
	committed int64         // last offset committed (or -1)
	held      map[int64]int // held offsets (count of holders)
}

// NewOffsets returns an empty tracker.
func NewOffsets() *Offsets { return &Offsets{parts: make(map[topicPartition]*partOffsets)} }

func (o *Offsets) part(topic string, partition int32) *partOffsets {
	k := topicPartition{topic, partition}
	p := o.parts[k]
	if p == nil {
		p = &partOffsets{committed: -1, held: make(map[int64]int)}
		o.parts[k] = p
	}
	return p
}

// Consumed records that the consumer has read the record at p (held or not).
func (o *Offsets) Consumed(p Pos) {
	po := o.part(p.Topic, p.Partition)
	po.next = max(po.next, p.Offset+1)
}

// Hold marks the record at p as still needed; it also counts as consumed.
func (o *Offsets) Hold(p Pos) {
	o.Consumed(p)
	o.part(p.Topic, p.Partition).held[p.Offset]++
}

// Release drops one hold of each record in ps.
func (o *Offsets) Release(ps ...Pos) {
	for _, p := range ps {
		po := o.parts[topicPartition{p.Topic, p.Partition}]
		if po == nil {
			continue
		}
		if n := po.held[p.Offset]; n > 1 {
			po.held[p.Offset] = n - 1
		} else {
			delete(po.held, p.Offset)
		}
	}
}

// Forget drops all state of a partition (it was revoked from this consumer).
func (o *Offsets) Forget(topic string, partition int32) {
	delete(o.parts, topicPartition{topic, partition})
}

// Committable returns, for every partition that advanced since the last MarkCommitted, the
// offset to commit: the oldest held offset, or one past the last consumed record if none is held.
func (o *Offsets) Committable() map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for k, p := range o.parts {
		at := p.next
		for off := range p.held {
			at = min(at, off)
		}
		if at <= p.committed || at <= 0 {
			continue
		}
		if out[k.topic] == nil {
			out[k.topic] = make(map[int32]int64)
		}
		out[k.topic][k.partition] = at
	}
	return out
}

// MarkCommitted records that offs (as returned by Committable) were committed.
func (o *Offsets) MarkCommitted(offs map[string]map[int32]int64) {
	for t, ps := range offs {
		for p, at := range ps {
			if po := o.parts[topicPartition{t, p}]; po != nil && at > po.committed {
				po.committed = at
			}
		}
	}
}
