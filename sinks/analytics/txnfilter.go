package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"
)

// controlAbort is the control-record type of an ABORT marker (COMMIT is 1).
const controlAbort = 0

// scanMaxBytes bounds one classification fetch.
const scanMaxBytes = 4 << 20

// txnFilter decides, per offset, whether a read_committed consumer may see a record: not a
// commit/abort marker and not part of an aborted transaction. It implements the Java client's
// algorithm (the broker lists the aborted transactions overlapping a fetch; a transactional
// batch is dropped while its producer has such an open aborted transaction, until that
// producer's ABORT marker) over kafka-go's protocol-level fetch, because kafka-go's Reader
// returns aborted records and markers as ordinary messages.
type txnFilter struct {
	rt    kafka.RoundTripper
	addr  net.Addr
	parts map[partKey]*partScan
}

type partKey struct {
	topic     string
	partition int
}

// partScan: every offset in [low, scanned) is classified; hidden lists the invisible ones there.
type partScan struct {
	low, scanned int64
	hidden       []span
}

type span struct{ from, to int64 } // inclusive

func newTxnFilter(rt kafka.RoundTripper, addr net.Addr) *txnFilter {
	return &txnFilter{rt: rt, addr: addr, parts: make(map[partKey]*partScan)}
}

// visible classifies offset. Offsets are asked in increasing order per partition except after a
// rebalance resets the position, which restarts classification there.
func (f *txnFilter) visible(ctx context.Context, topic string, partition int, offset int64) (bool, error) {
	k := partKey{topic, partition}
	ps := f.parts[k]
	if ps == nil || offset < ps.low {
		ps = &partScan{low: offset, scanned: offset}
		f.parts[k] = ps
	}
	for stalls := 0; offset >= ps.scanned; {
		before := ps.scanned
		if err := f.scan(ctx, topic, partition, ps); err != nil {
			return false, err
		}
		if ps.scanned == before {
			if stalls++; stalls >= 3 {
				return false, fmt.Errorf("classify %s/%d@%d: the broker returned no records at or after %d", topic, partition, offset, before)
			}
		}
	}
	for len(ps.hidden) > 0 && ps.hidden[0].to < offset {
		ps.hidden = ps.hidden[1:]
	}
	ps.low = offset
	return !(len(ps.hidden) > 0 && ps.hidden[0].from <= offset), nil
}

func (f *txnFilter) scan(ctx context.Context, topic string, partition int, ps *partScan) error {
	res, err := f.rt.RoundTrip(ctx, f.addr, &fetchAPI.Request{
		ReplicaID: -1, MaxWaitTime: 500, MinBytes: 1, MaxBytes: scanMaxBytes,
		IsolationLevel: int8(kafka.ReadCommitted), SessionID: -1, SessionEpoch: -1,
		Topics: []fetchAPI.RequestTopic{{Topic: topic, Partitions: []fetchAPI.RequestPartition{{
			Partition: int32(partition), CurrentLeaderEpoch: -1, FetchOffset: ps.scanned,
			LogStartOffset: -1, PartitionMaxBytes: scanMaxBytes,
		}}}},
	})
	if err != nil {
		return fmt.Errorf("classify %s/%d from %d: %w", topic, partition, ps.scanned, err)
	}
	fr, ok := res.(*fetchAPI.Response)
	if !ok || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return fmt.Errorf("classify %s/%d: unexpected fetch response %T", topic, partition, res)
	}
	p := &fr.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return fmt.Errorf("classify %s/%d from %d: %w", topic, partition, ps.scanned, kafka.Error(p.ErrorCode))
	}
	if p.RecordSet.Records == nil {
		return nil
	}
	aborted := append([]fetchAPI.ResponseTransaction(nil), p.AbortedTransactions...)
	sort.Slice(aborted, func(i, j int) bool { return aborted[i].FirstOffset < aborted[j].FirstOffset })
	open := make(map[int64]bool) // producers inside an aborted transaction
	var batches []protocol.RecordReader
	if st, ok := p.RecordSet.Records.(*protocol.RecordStream); ok {
		batches = st.Records
	} else {
		batches = []protocol.RecordReader{p.RecordSet.Records}
	}
	for _, rr := range batches {
		switch b := rr.(type) {
		case *protocol.ControlBatch:
			cr, err := b.ReadControlRecord()
			if err != nil {
				return fmt.Errorf("classify %s/%d: control batch at %d: %w", topic, partition, b.BaseOffset, err)
			}
			if cr.Type == controlAbort {
				delete(open, b.ProducerID)
			}
			ps.hide(span{cr.Offset, cr.Offset})
		case *protocol.RecordBatch:
			first, last, err := batchRange(b)
			if err != nil {
				return fmt.Errorf("classify %s/%d: batch at %d: %w", topic, partition, b.BaseOffset, err)
			}
			if last < 0 {
				continue
			}
			for len(aborted) > 0 && aborted[0].FirstOffset <= last {
				open[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			if b.Attributes.Transactional() && open[b.ProducerID] {
				ps.hide(span{first, last})
			}
			ps.scanned = max(ps.scanned, last+1)
		default:
			return fmt.Errorf("classify %s/%d: unsupported record set %T (message format before v2?)", topic, partition, rr)
		}
	}
	return nil
}

// hide appends a span (batches arrive in offset order) and advances the scan position.
func (ps *partScan) hide(s span) {
	if s.to < ps.low {
		return
	}
	ps.hidden = append(ps.hidden, s)
	ps.scanned = max(ps.scanned, s.to+1)
}

func batchRange(b *protocol.RecordBatch) (first, last int64, err error) {
	first, last = -1, -1
	for {
		r, err := b.ReadRecord()
		if errors.Is(err, io.EOF) {
			return first, last, nil
		}
		if err != nil {
			return 0, 0, err
		}
		if first < 0 {
			first = r.Offset
		}
		last = r.Offset
		if r.Key != nil {
			r.Key.Close()
		}
		if r.Value != nil {
			r.Value.Close()
		}
	}
}
