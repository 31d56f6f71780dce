package correct

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// readToEnd reads the given partitions (read_committed) from their start offsets to the end and
// hands every data record to fn, in offset order per partition.
//
// "The end" is the last stable offset once it has caught up with the high watermark: right after
// a fenced or crashed predecessor, its transaction markers may still be in flight, and a record
// read before its marker would be missed. If the two do not meet within half the timeout (a
// foreign open transaction), the read stops at the last stable offset and says so. Control
// records are kept (and skipped here) so that the last offset before the end is always seen.
func readToEnd(ctx context.Context, opts []kgo.Opt, start map[string]map[int32]kgo.Offset, timeout time.Duration, log *slog.Logger, fn func(*kgo.Record) error) error {
	if len(start) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	adm := kadm.NewClient(admCl)
	defer admCl.Close()
	var names []string
	for t := range start {
		names = append(names, t)
	}
	settle := time.Now().Add(timeout / 2)
	ends := map[tp]int64{}
	for {
		hwm, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return fmt.Errorf("list end offsets: %w", err)
		}
		lso, err := adm.ListCommittedOffsets(ctx, names...)
		if err != nil {
			return fmt.Errorf("list stable offsets: %w", err)
		}
		settled := true
		for t, parts := range start {
			for p := range parts {
				h, ok1 := hwm.Lookup(t, p)
				l, ok2 := lso.Lookup(t, p)
				if !ok1 || !ok2 || h.Err != nil || l.Err != nil {
					return fmt.Errorf("%s partition %d has no offsets (does the topic exist with enough partitions?): %w",
						t, p, errors.Join(h.Err, l.Err))
				}
				ends[tp{t, p}] = l.Offset
				if l.Offset != h.Offset {
					settled = false
				}
			}
		}
		if settled {
			break
		}
		if time.Now().After(settle) {
			log.Warn("open transaction on a partition; reading to its last stable offset", "topics", names)
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for stable offsets: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}

	assign := map[string]map[int32]kgo.Offset{}
	remaining := 0
	done := map[tp]bool{}
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
	if remaining == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(assign),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading to offsets %v: %w", ends, err)
		}
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			key := tp{r.Topic, r.Partition}
			if ferr != nil || done[key] || r.Offset >= ends[key] {
				return
			}
			if r.Offset >= ends[key]-1 {
				done[key] = true
				remaining--
			}
			if r.Attrs.IsControl() {
				return
			}
			ferr = fn(r)
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// readChangelog returns the latest snapshot per calibration key in the given partitions.
func readChangelog(ctx context.Context, opts []kgo.Opt, topic string, parts []int32, timeout time.Duration, log *slog.Logger) (map[string]snapAt, error) {
	out := map[string]snapAt{}
	if len(parts) == 0 {
		return out, nil
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for _, p := range parts {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	err := readToEnd(ctx, opts, start, timeout, log, func(r *kgo.Record) error {
		s, err := topics.DecodeCalibration(r.Value)
		if err != nil {
			// A changelog record this consumer cannot read means state cannot be trusted.
			return fmt.Errorf("%w: %s/%d offset %d: %w", ErrChangelog, r.Topic, r.Partition, r.Offset, err)
		}
		key := string(topics.CalibrationKey(s.RunID, s.Stream))
		if string(r.Key) != key {
			return fmt.Errorf("%w: %s/%d offset %d: key %q does not match snapshot %s", ErrChangelog, r.Topic, r.Partition, r.Offset, r.Key, key)
		}
		if prev, ok := out[key]; !ok || s.Step >= prev.snap.Step {
			out[key] = snapAt{snap: s, part: r.Partition}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrChangelog) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrChangelog, topic, err)
	}
	return out, nil
}

// snapAt is a snapshot and the calibration partition it came from (which is the run's input
// partition number, because the consumer produces it there).
type snapAt struct {
	snap topics.CalibrationSnapshot
	part int32
}
