package statestore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
)

// StreamSummary is what Redis holds of one (run, stream), read without assembling its window.
type StreamSummary struct {
	Stream string
	// Head is the stream's head hash; nil when the run's streams set names the stream but its
	// head is gone (expired) or not written yet.
	Head *Head
	// StateBytes is the size of the latest sealed state as stored: the STRLEN of its state value
	// (the digest and head) plus the STRLEN of every window chunk that state's window reaches.
	// Redis's per-key overhead and the snapshots of older kept steps are not counted: it is what
	// a rebuild reads for the stream, not the Redis memory the stream occupies.
	StateBytes int64
	// Unreadable says why the state value could not be read (a form this build refuses, or
	// corrupt); StateBytes then counts the value alone. A listing shows the other streams and
	// runs as usual; the correct stage refuses such a state and rebuilds it from the changelog.
	Unreadable error
	// TTL is the remaining time to live of the head key: NoExpiry while the run is live (wmrl
	// correct expires an ended run's keys after its retention), 0 when the key is gone.
	TTL time.Duration
}

// RunSummary is what Redis holds of one run under a store's prefix.
type RunSummary struct {
	Run     string
	Streams []StreamSummary // sorted by stream
	End     *RunEnd         // nil: the run has not ended (or its end expired)
	// TTL is the remaining time to live of the run's streams set (or of its end hash when the
	// set is gone): NoExpiry, or 0 when neither exists.
	TTL time.Duration
}

// NoExpiry is the TTL of a key that does not expire.
const NoExpiry = time.Duration(-1)

// SealedStep is the last step sealed over the run's streams (the largest head), −1 if none.
func (r *RunSummary) SealedStep() int64 {
	last := int64(-1)
	for _, s := range r.Streams {
		if s.Head != nil {
			last = max(last, s.Head.SealedStep)
		}
	}
	return last
}

// StateBytes is the sum of the streams' StateBytes.
func (r *RunSummary) StateBytes() int64 {
	var n int64
	for _, s := range r.Streams {
		n += s.StateBytes
	}
	return n
}

// ListRuns lists the runs under the store's prefix that have a streams set or an end hash (a
// run that ended before any step was sealed has only the latter), sorted. It scans
// the keyspace, on every master of a cluster: an operator's listing, not a hot path.
func (s *Store) ListRuns(ctx context.Context) ([]string, error) {
	// One SCAN for both kinds of key.
	pattern := s.runKeysPattern()
	seen := map[string]bool{}
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 10000).Iterator()
		for it.Next(ctx) {
			run := s.runOfKey(it.Val())
			if run == "" {
				continue
			}
			mu.Lock()
			seen[run] = true
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, s.failed(ctx, err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// Summaries reads what Redis holds of runs in four pipelined round trips, however many runs and
// streams: the streams sets, end hashes and TTLs; the heads and their TTLs; the state values at
// the heads' steps; the lengths of the window chunks those states reach. A run with neither a
// streams set nor an end yields a summary without streams or end (the caller names it missing).
func (s *Store) Summaries(ctx context.Context, runs []string) ([]RunSummary, error) {
	out := make([]RunSummary, len(runs))
	refs, err := s.runSummaries(ctx, runs, out)
	if err == nil {
		refs, err = s.streamHeads(ctx, refs)
	}
	if err == nil {
		err = s.stateBytes(ctx, refs)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// streamRef is one stream of a run in Summaries.
type streamRef struct {
	run string
	ss  *StreamSummary
}

// exec runs a read pipeline; a missing key is not an error.
func (s *Store) exec(ctx context.Context, what string, pipe redis.Pipeliner) error {
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis %s: %w", what, s.failed(ctx, err))
	}
	return nil
}

// runSummaries fills out with the runs' streams, ends and TTLs (round trip 1) and returns their
// streams.
func (s *Store) runSummaries(ctx context.Context, runs []string, out []RunSummary) ([]streamRef, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(runs))
	ends := make([]*redis.MapStringStringCmd, len(runs))
	ttls := make([]*redis.DurationCmd, len(runs))
	endTTLs := make([]*redis.DurationCmd, len(runs))
	for i, run := range runs {
		members[i] = pipe.SMembers(ctx, s.StreamsKey(run))
		ends[i] = pipe.HGetAll(ctx, s.EndKey(run))
		ttls[i] = pipe.PTTL(ctx, s.StreamsKey(run))
		endTTLs[i] = pipe.PTTL(ctx, s.EndKey(run))
	}
	if err := s.exec(ctx, "run summaries", pipe); err != nil {
		return nil, err
	}
	var refs []streamRef
	for i, run := range runs {
		out[i].Run = run
		streams, err := members[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redis streams of run %s: %w", run, err)
		}
		slices.Sort(streams)
		for _, st := range streams {
			out[i].Streams = append(out[i].Streams, StreamSummary{Stream: st})
		}
		for j := range out[i].Streams {
			refs = append(refs, streamRef{run, &out[i].Streams[j]})
		}
		if m, err := ends[i].Result(); err == nil && len(m) > 0 {
			e, err := parseEnd(m)
			if err != nil {
				return nil, fmt.Errorf("redis end of run %s: %w", run, err)
			}
			out[i].End = e
		}
		out[i].TTL = cmp.Or(ttl(ttls[i]), ttl(endTTLs[i]))
	}
	return refs, nil
}

// streamHeads reads the streams' heads and their TTLs (round trip 2) and returns the streams
// that have a head.
func (s *Store) streamHeads(ctx context.Context, refs []streamRef) ([]streamRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	heads := make([]*redis.MapStringStringCmd, len(refs))
	headTTLs := make([]*redis.DurationCmd, len(refs))
	for j, r := range refs {
		heads[j] = pipe.HGetAll(ctx, s.HeadKey(r.run, r.ss.Stream))
		headTTLs[j] = pipe.PTTL(ctx, s.HeadKey(r.run, r.ss.Stream))
	}
	if err := s.exec(ctx, "heads", pipe); err != nil {
		return nil, err
	}
	var withHead []streamRef
	for j, r := range refs {
		r.ss.TTL = ttl(headTTLs[j])
		m, err := heads[j].Result()
		if err != nil || len(m) == 0 {
			continue
		}
		if r.ss.Head, err = parseHead(m); err != nil {
			return nil, fmt.Errorf("redis head of %s/%s: %w", r.run, r.ss.Stream, err)
		}
		withHead = append(withHead, r)
	}
	return withHead, nil
}

// stateBytes sums the bytes of the state values at the streams' heads (round trip 3) and of the
// window chunks those states reach (round trip 4).
func (s *Store) stateBytes(ctx context.Context, refs []streamRef) error {
	if len(refs) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	values := make([]*redis.StringCmd, len(refs))
	for k, r := range refs {
		values[k] = pipe.Get(ctx, s.StateKey(r.run, r.ss.Stream, r.ss.Head.SealedStep))
	}
	if err := s.exec(ctx, "state values", pipe); err != nil {
		return err
	}
	pipe = s.rdb.Pipeline()
	chunkLens := make([][]*redis.IntCmd, len(refs))
	for k, r := range refs {
		v, err := values[k].Bytes()
		if err != nil {
			continue // the state value expired or was trimmed between the round trips
		}
		r.ss.StateBytes = int64(len(v))
		if len(v) < sha256.Size {
			r.ss.Unreadable = fmt.Errorf("redis state of %s/%s step %d: %d bytes, shorter than its digest", r.run, r.ss.Stream, r.ss.Head.SealedStep, len(v))
			continue
		}
		first, n, _, err := correction.HeadWindow(v[sha256.Size:])
		if err != nil {
			r.ss.Unreadable = fmt.Errorf("redis state of %s/%s step %d: %w", r.run, r.ss.Stream, r.ss.Head.SealedStep, err)
			continue
		}
		const c = correction.ChunkPairs
		for ch := first / c; n > 0 && ch <= (first+uint64(n)-1)/c; ch++ {
			chunkLens[k] = append(chunkLens[k], pipe.StrLen(ctx, s.keys(r.run, r.ss.Stream).chunk(ch)))
		}
	}
	if err := s.exec(ctx, "window chunks", pipe); err != nil {
		return err
	}
	for k, r := range refs {
		for _, c := range chunkLens[k] {
			r.ss.StateBytes += c.Val()
		}
	}
	return nil
}

// ttl is a PTTL reply as a duration: NoExpiry for a key without expiry, 0 for a missing key.
func ttl(c *redis.DurationCmd) time.Duration {
	d, err := c.Result() // go-redis passes PTTL's −2 (no key) and −1 (no expiry) through as is
	switch {
	case err != nil, d == -2:
		return 0
	case d < 0:
		return NoExpiry
	}
	return d
}
