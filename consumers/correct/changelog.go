package correct

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
)

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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := topicread.ToEnd(ctx, opts, start, timeout/2, log, func(r *kgo.Record) error {
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
