// Package oversize moves a consumer past record batches it refuses because they decompress past
// its limit (franz-go's MaxDecompressBatchBytes; topics.MaxBatchBytes derives it). franz-go stops
// fetching such a partition until the consumer sets its offset past the batch; a consumer that
// only logged the error would stop on that partition for good, and meet the batch again after
// every restart. Every wmrl consumer hands its fetches to a Skipper, which seeks past each refused
// batch, counts it and warns; the consumer then dead-letters the batch by reference where it may
// write the DLQ (topics.DeadLetterWriter.BatchRecord) and commits past it.
package oversize

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmrl/wmrl/topics"
)

// PeakFactor bounds what refusing one batch costs a consumer, in multiples of its limit
// (MaxDecompressBatchBytes): franz-go decodes into a growing buffer until the bound is passed, and
// the decoder's window, the buffer's growth and the garbage the collector has not yet returned
// come on top, and when the collector runs is not ours to choose. Measured on the real broker
// (in-process, above the test's baseline): 4–6.6× for a 256 MiB bomb at 16 and 32 MiB limits
// (docs/reliability.md); the tests hold every consumer to this factor.
const PeakFactor = 8

// MetricName is the counter of skipped batches, labelled stage and reason.
const MetricName = "wmrl_stage_batches_skipped_total"

// NewCounter returns wmrl_stage_batches_skipped_total{stage, reason} for stage, with the
// batch-too-large series at 0 from the start so an alert on its increase works before the first.
func NewCounter(stage string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        MetricName,
		Help:        "Record batches skipped unread, by reason (batch-too-large: decompresses past --max-batch-bytes); each is dead-lettered by reference where the stage may write the DLQ.",
		ConstLabels: prometheus.Labels{"stage": stage},
	}, []string{"reason"})
	c.WithLabelValues(topics.ReasonBatchTooLarge)
	return c
}

// Refused reports whether a fetch error is a batch refused for its decompressed size; consumers
// leave those to a Skipper.
func Refused(err error) bool { return errors.Is(err, kgo.ErrMaxDecompress) }

// Skipper moves one client past the batches it refuses.
type Skipper struct {
	cl      *kgo.Client
	log     *slog.Logger
	counter *prometheus.CounterVec
	limit   int
	// Action ends the warning: what the consumer does with a skipped batch (e.g. "dead-lettered
	// by reference").
	action    string
	probeOpts []kgo.Opt
}

// NewSkipper returns a Skipper for cl (built with kgo.MaxDecompressBatchBytes), warning on log
// (slog.Default when nil), counting on counter (none when nil); action completes the warning.
func NewSkipper(cl *kgo.Client, log *slog.Logger, counter *prometheus.CounterVec, action string) *Skipper {
	log = cmp.Or(log, slog.Default())
	limit, _ := cl.OptValue(kgo.MaxDecompressBatchBytes).(int)
	return &Skipper{cl: cl, log: log, counter: counter, limit: limit, action: action}
}

// Limit is the client's MaxDecompressBatchBytes.
func (s *Skipper) Limit() int { return s.limit }

// Skip finds the batches fs refused, sets the client's offsets past each (to its NextOffset at
// its leader epoch, so fetching the partition resumes with the next poll), counts and warns, and
// returns them in fetch order. Recording the skip (a commit past the batch, a dead letter) is
// the caller's.
func (s *Skipper) Skip(fs kgo.Fetches) []topics.BatchRef {
	var refs []topics.BatchRef
	fs.EachError(func(_ string, _ int32, err error) {
		if e, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
			refs = append(refs, topics.BatchRefOf(e, s.limit))
		}
	})
	if len(refs) == 0 {
		return nil
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range refs {
		if set[r.Topic] == nil {
			set[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.Epoch, Offset: r.NextOffset}
		if s.counter != nil {
			s.counter.WithLabelValues(topics.ReasonBatchTooLarge).Inc()
		}
		s.log.Warn("record batch decompresses past --max-batch-bytes; skipped unread, "+s.action,
			"topic", r.Topic, "partition", r.Partition, "first_offset", r.Offset, "next_offset", r.NextOffset,
			"limit_bytes", r.Limit, "reason", topics.ReasonBatchTooLarge)
	}
	s.cl.SetOffsets(set)
	return refs
}

// WithSizeProbe returns s, learning the compressed size of refused batches (BatchBytes) with a
// short-lived client of its own built from connOpts (seeds, SASL, TLS; no consumer options): the
// consumer's own fetch connection is busy with its long poll, which would delay the request.
func (s *Skipper) WithSizeProbe(connOpts []kgo.Opt) *Skipper {
	s.probeOpts = connOpts
	return s
}

// BatchBytes returns the size on the wire (header included: what the broker's max.message.bytes
// counts) of the batch ref names, with one fetch of at most one batch from the partition's
// leader: franz-go does not report it with the refusal. 0 when it cannot be learned (no
// WithSizeProbe, the partition moved, the batch was deleted, the request failed); the caller
// leaves it out then.
func (s *Skipper) BatchBytes(ctx context.Context, ref topics.BatchRef) int {
	if s.probeOpts == nil {
		return 0
	}
	cl, err := kgo.NewClient(s.probeOpts...)
	if err != nil {
		s.log.Debug("compressed size of a refused batch unknown", "topic", ref.Topic, "partition", ref.Partition, "err", err)
		return 0
	}
	defer cl.Close()
	n, err := batchBytes(ctx, cl, ref)
	if err != nil {
		s.log.Debug("compressed size of a refused batch unknown", "topic", ref.Topic, "partition", ref.Partition, "err", err)
		return 0
	}
	return n
}

func batchBytes(ctx context.Context, cl *kgo.Client, ref topics.BatchRef) (int, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(ref.Topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(mresp.Topics) != 1 {
		return 0, errors.New("topic not in metadata")
	}
	mtopic := mresp.Topics[0]
	leader := int32(-1)
	for _, p := range mtopic.Partitions {
		if p.Partition == ref.Partition {
			leader = p.Leader
		}
	}
	if leader < 0 {
		return 0, errors.New("partition has no leader")
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MinBytes, req.MaxWaitMillis = -1, 1, 1, 0
	req.SessionEpoch = -1 // no fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = ref.Topic, mtopic.TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	// The broker returns the first batch whole even over the byte limits of 1.
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = ref.Partition, ref.Offset, 1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, errors.New("malformed fetch response")
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return 0, err
	}
	b := p.RecordBatches
	// FirstOffset int64, Length int32 (the bytes after it): the batch must be the one refused.
	if len(b) < 12 || int64(binary.BigEndian.Uint64(b)) != ref.Offset {
		return 0, errors.New("the refused batch is not at its offset any more")
	}
	return 12 + int(int32(binary.BigEndian.Uint32(b[8:]))), nil
}
