package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RunEnd is what Redis records of an ended run: `wmrl correct` writes it when it retires the run
// (its last step sealed and committed), and `wmrl runs` reads it. It lives in the run's own hash
// slot ({run}, as StreamsKey) and expires with the run's other keys after the ended-run retention.
type RunEnd struct {
	LastStep int64     // the run's last step
	EndedAt  time.Time // when the end was recorded (the end-of-run record's timestamp)
	Reason   string    // topics.EndReasonMarker or topics.EndReasonIdle
}

// The fields of the EndKey hash.
const (
	endFieldLast   = "last_step"
	endFieldAtMs   = "ended_at_ms"
	endFieldReason = "reason"
)

// RecordEnd records run's end (HSET of the EndKey hash). Expiring the run's keys is the
// caller's separate step: the end is recorded at retirement, the keys expire after the retention.
func (s *Store) RecordEnd(ctx context.Context, run string, e RunEnd) error {
	fields := map[string]any{endFieldLast: e.LastStep, endFieldAtMs: e.EndedAt.UnixMilli(), endFieldReason: e.Reason}
	if err := s.failed(ctx, s.rdb.HSet(ctx, s.EndKey(run), fields).Err()); err != nil {
		return fmt.Errorf("redis end of run %s: %w", run, err)
	}
	return nil
}

// ReadEnd returns run's recorded end, or nil when the run has not ended (or its keys expired).
func (s *Store) ReadEnd(ctx context.Context, run string) (*RunEnd, error) {
	m, err := s.rdb.HGetAll(ctx, s.EndKey(run)).Result()
	if err = s.failed(ctx, err); err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, fmt.Errorf("redis end of run %s: %w", run, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	e, err := parseEnd(m)
	if err != nil {
		return nil, fmt.Errorf("redis end of run %s: %w", run, err)
	}
	return e, nil
}

// parseEnd is the EndKey hash's fields as a RunEnd (ReadEnd, and Summaries' pipelined replies).
func parseEnd(m map[string]string) (*RunEnd, error) {
	last, err := strconv.ParseInt(m[endFieldLast], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", endFieldLast, err)
	}
	at, err := strconv.ParseInt(m[endFieldAtMs], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", endFieldAtMs, err)
	}
	return &RunEnd{LastStep: last, EndedAt: time.UnixMilli(at).UTC(), Reason: m[endFieldReason]}, nil
}

// ExpireRun makes every key of run expire after d (PEXPIRE): EndKey, VerdictsKey, StreamsKey and, per stream
// of the streams set, its head, steps, lows and chunks keys, the state keys its steps set lists
// and the chunk keys its chunks set lists (the key set write.lua maintains). `wmrl correct` calls
// it when it retires a run, with what is left of the ended-run retention, so dashboards show a
// finished run until then and Redis forgets it afterwards. The per-stream keys live in other
// hash slots than the run's ({run/stream} against {run}), so on a Redis Cluster the commands go
// in plain pipelines, one per round, never in a MULTI across slots. The run-level keys expire
// last: should a round fail, a retry still finds the streams set. d below a millisecond counts
// as one.
func (s *Store) ExpireRun(ctx context.Context, run string, d time.Duration) error {
	d = max(d, time.Millisecond)
	streams, err := s.Streams(ctx, run)
	if err != nil {
		return fmt.Errorf("redis expire run %s: streams: %w", run, err)
	}
	if len(streams) > 0 {
		read := s.rdb.Pipeline()
		steps := make([]*redis.StringSliceCmd, len(streams))
		chunks := make([]*redis.StringSliceCmd, len(streams))
		for i, st := range streams {
			steps[i] = read.ZRange(ctx, s.StepsKey(run, st), 0, -1)
			chunks[i] = read.ZRange(ctx, s.keys(run, st).chunks(), 0, -1)
		}
		if _, err := read.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("redis expire run %s: read key sets: %w", run, s.failed(ctx, err))
		}
		exp := s.rdb.Pipeline()
		for i, st := range streams {
			k := s.keys(run, st)
			for _, key := range []string{k.head(), k.steps(), k.lows(), k.chunks()} {
				exp.PExpire(ctx, key, d)
			}
			for _, v := range steps[i].Val() {
				exp.PExpire(ctx, k.statePrefix()+v, d)
			}
			for _, c := range chunks[i].Val() {
				exp.PExpire(ctx, k.chunkPrefix()+c, d)
			}
		}
		if _, err := exp.Exec(ctx); err != nil {
			return fmt.Errorf("redis expire run %s: stream keys: %w", run, s.failed(ctx, err))
		}
	}
	run1 := s.rdb.Pipeline()
	run1.PExpire(ctx, s.EndKey(run), d)
	run1.PExpire(ctx, s.VerdictsKey(run), d)
	run1.PExpire(ctx, s.StreamsKey(run), d)
	if _, err := run1.Exec(ctx); err != nil {
		return fmt.Errorf("redis expire run %s: %w", run, s.failed(ctx, err))
	}
	return nil
}
