// Package topicread reads Kafka partitions read_committed from given offsets to their committed
// end and stops there: the bounded read behind state rebuilds, replays and digests, as opposed
// to a consumer group that follows a topic for ever.
package topicread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/topics"
)

type tp struct {
	topic     string
	partition int32
}

// PartitionCount returns the number of partitions of topic; an error when it does not exist.
func PartitionCount(ctx context.Context, opts []kgo.Opt, topic string) (int, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("list topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s not found (does it exist?): %w", topic, errors.Join(d.Err))
	}
	return len(d.Partitions), nil
}

// Partitions returns every partition of topic, each starting at the log start: the start map a
// whole-topic read passes to ToEnd.
func Partitions(ctx context.Context, opts []kgo.Opt, topic string) (map[string]map[int32]kgo.Offset, error) {
	n, err := PartitionCount(ctx, opts, topic)
	if err != nil {
		return nil, err
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range int32(n) {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	return start, nil
}

// Option changes how ToEnd reads.
type Option func(*readOpts)

type readOpts struct {
	onBatch func(topics.BatchRef) error
}

// OnBatchTooLarge calls fn for every record batch ToEnd skips because it decompresses past the
// client's MaxDecompressBatchBytes; an error from fn ends the read with that error.
func OnBatchTooLarge(fn func(topics.BatchRef) error) Option {
	return func(o *readOpts) { o.onBatch = fn }
}

// DefaultMaxBatchBytes is the MaxDecompressBatchBytes of ToEnd's client unless opts set one:
// the largest records read this way are advantages.
var DefaultMaxBatchBytes = topics.MaxBatchBytes(topics.MaxAdvantageBytes)

// ToEnd reads the given partitions (read_committed) from their start offsets to the end and
// hands every data record to fn, in offset order per partition.
//
// A record batch that decompresses past the client's MaxDecompressBatchBytes (opts, else
// DefaultMaxBatchBytes) is skipped unread with a warning on log (slog.Default when nil) and
// reported to the OnBatchTooLarge option's function, so that no batch stops a bounded read and no
// batch costs more memory than the limit; its records are not handed to fn.
//
// "The end" is the last stable offset once it has caught up with the high watermark: right after
// a fenced or crashed predecessor, its transaction markers may still be in flight, and a record
// read before its marker would be missed. If the two do not meet within settle (a foreign open
// transaction; 0 does not wait), the read stops at the last stable offset and says so. Control
// records are kept (and skipped here) so that the last offset before the end is always seen.
func ToEnd(ctx context.Context, opts []kgo.Opt, start map[string]map[int32]kgo.Offset, settle time.Duration, log *slog.Logger, fn func(*kgo.Record) error, options ...Option) error {
	if len(start) == 0 {
		return nil
	}
	var ro readOpts
	for _, o := range options {
		o(&ro)
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	adm := kadm.NewClient(admCl)
	defer admCl.Close()
	ends, err := stableEnds(ctx, adm, start, settle, log)
	if err != nil {
		return err
	}
	assign, remaining := toRead(start, ends)
	if remaining == 0 {
		return nil
	}
	// The default limit goes first so that one in opts overrides it.
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.MaxDecompressBatchBytes(DefaultMaxBatchBytes)}, opts...),
		kgo.ConsumePartitions(assign),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	skip := oversize.NewSkipper(cl, log, nil, "left out of the read")
	rd := reading{ends: ends, done: map[tp]bool{}, remaining: remaining}
	for rd.remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading to offsets %v: %w", ends, err)
		}
		if err := rd.skipped(skip.Skip(fs), ro.onBatch); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) || oversize.Refused(fe.Err) {
				continue
			}
			return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		if err := rd.records(fs, fn); err != nil {
			return err
		}
	}
	return nil
}

// reading is ToEnd's progress: where each partition's read ends, which partitions are done, and
// how many are not.
type reading struct {
	ends      map[tp]int64
	done      map[tp]bool
	remaining int
}

// skipped accounts for the record batches skipped as too large, reporting those before the end
// to onBatch (when not nil): a skipped batch that reaches the end finishes its partition.
func (rd *reading) skipped(refs []topics.BatchRef, onBatch func(topics.BatchRef) error) error {
	for _, ref := range refs {
		key := tp{ref.Topic, ref.Partition}
		if rd.done[key] || ref.Offset >= rd.ends[key] {
			continue // past the end: not part of this read
		}
		if ref.NextOffset >= rd.ends[key] {
			rd.done[key] = true
			rd.remaining--
		}
		if onBatch != nil {
			if err := onBatch(ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// records hands fs's data records before the end to fn, stopping at fn's first error; the
// record (data or control) just before a partition's end finishes it.
func (rd *reading) records(fs kgo.Fetches, fn func(*kgo.Record) error) error {
	var ferr error
	fs.EachRecord(func(r *kgo.Record) {
		key := tp{r.Topic, r.Partition}
		if ferr != nil || rd.done[key] || r.Offset >= rd.ends[key] {
			return
		}
		if r.Offset >= rd.ends[key]-1 {
			rd.done[key] = true
			rd.remaining--
		}
		if r.Attrs.IsControl() {
			return
		}
		ferr = fn(r)
	})
	return ferr
}

// stableEnds is where the read of start's partitions ends: each partition's last stable offset,
// waiting up to settle for open transactions to finish (then it reads to the last stable offset
// and warns); 0 when retention removed everything below it.
func stableEnds(ctx context.Context, adm *kadm.Client, start map[string]map[int32]kgo.Offset, settle time.Duration, log *slog.Logger) (map[tp]int64, error) {
	names := slices.Collect(maps.Keys(start))
	settleBy := time.Now().Add(settle)
	ends := map[tp]int64{}
	for {
		hwm, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("list end offsets: %w", err)
		}
		lso, err := adm.ListCommittedOffsets(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("list stable offsets: %w", err)
		}
		logStart, err := adm.ListStartOffsets(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("list start offsets: %w", err)
		}
		settled := true
		for t, parts := range start {
			for p := range parts {
				h, ok1 := hwm.Lookup(t, p)
				l, ok2 := lso.Lookup(t, p)
				if !ok1 || !ok2 || h.Err != nil || l.Err != nil {
					return nil, fmt.Errorf("%s partition %d has no offsets (does the topic exist with enough partitions?): %w",
						t, p, errors.Join(h.Err, l.Err))
				}
				ends[tp{t, p}] = l.Offset
				if s, ok := logStart.Lookup(t, p); ok && s.Err == nil && s.Offset >= l.Offset {
					ends[tp{t, p}] = 0 // retention removed everything below the end: nothing to read
				}
				if l.Offset != h.Offset {
					settled = false
				}
			}
		}
		if settled {
			return ends, nil
		}
		if !time.Now().Before(settleBy) {
			if log != nil {
				log.Warn("open transaction on a partition; reading to its last stable offset", "topics", names)
			}
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for stable offsets: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// toRead assigns each partition of start that has records below its end, and counts them.
func toRead(start map[string]map[int32]kgo.Offset, ends map[tp]int64) (assign map[string]map[int32]kgo.Offset, remaining int) {
	assign = map[string]map[int32]kgo.Offset{}
	for t, parts := range start {
		for p, o := range parts {
			end := ends[tp{t, p}]
			if so := o.EpochOffset().Offset; end == 0 || (so >= 0 && so >= end) {
				continue
			}
			if assign[t] == nil {
				assign[t] = map[int32]kgo.Offset{}
			}
			assign[t][p] = o
			remaining++
		}
	}
	return assign, remaining
}
