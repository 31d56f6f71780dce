// Package oversize moves a consumer past record batches it refuses because they decompress past
// its limit (franz-go's MaxDecompressBatchBytes; topics.MaxBatchBytes derives it). franz-go stops
// fetching such a partition until the consumer sets its offset past the batch; a consumer that
// only logged the error would stop on that partition for good, and meet the batch again after
// every restart. Every wmrl consumer hands its fetches to a Skipper, which seeks past each refused
// batch, counts it and warns; the consumer then dead-letters the batch by reference where it may
// write the DLQ (topics.DeadLetterWriter.BatchRecord) and commits past it.
package oversize

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

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
	action string
}

// NewSkipper returns a Skipper for cl (built with kgo.MaxDecompressBatchBytes), warning on log
// (slog.Default when nil), counting on counter (none when nil); action completes the warning.
func NewSkipper(cl *kgo.Client, log *slog.Logger, counter *prometheus.CounterVec, action string) *Skipper {
	if log == nil {
		log = slog.Default()
	}
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
