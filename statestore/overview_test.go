package statestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// TestRunsSummaries: ListRuns finds runs by their streams set or their end alone, not another
// prefix's runs; Summaries reads heads, ends, TTLs and the bytes of the latest state (its value
// plus the chunks its window reaches, not the older kept steps' values).
func TestRunsSummaries(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	s := New(rdb, "p", 3)
	states := sealedStates(t, 40)
	for v, st := range states {
		var prev *correction.State
		if v > 0 {
			prev = states[v-1]
		}
		w := storeWrite(st, prev, v == 0)
		if _, err := s.Write(ctx, []Write{w}, map[string][]string{"r": {"s"}}); err != nil {
			t.Fatal(err)
		}
	}
	end := RunEnd{LastStep: 7, EndedAt: time.UnixMilli(1_765_000_000_000).UTC(), Reason: topics.EndReasonIdle}
	if err := s.RecordEnd(ctx, "gone", end); err != nil {
		t.Fatal(err)
	}
	if err := New(rdb, "other", 3).RecordEnd(ctx, "x", end); err != nil {
		t.Fatal(err)
	}
	mr.SetTTL(s.EndKey("gone"), time.Hour)

	runs, err := s.ListRuns(ctx)
	if err != nil || !slices.Equal(runs, []string{"gone", "r"}) {
		t.Fatalf("ListRuns = %v, %v", runs, err)
	}
	sums, err := s.Summaries(ctx, append(runs, "none"))
	if err != nil {
		t.Fatal(err)
	}
	last := states[len(states)-1]
	first, n := last.WindowSpan()
	var chunkBytes int64
	for c := first / 128; c <= (first+uint64(n)-1)/128; c++ {
		v, err := rdb.StrLen(ctx, s.keys("r", "s").chunk(c)).Result()
		if err != nil || v == 0 {
			t.Fatalf("chunk %d: %d %v", c, v, err)
		}
		chunkBytes += v
	}
	value, _ := rdb.StrLen(ctx, s.StateKey("r", "s", last.SealedStep())).Result()

	for _, tc := range []struct {
		name string
		got  RunSummary
		want func(RunSummary) bool
	}{
		{"ended without state", sums[0], func(r RunSummary) bool {
			return r.Run == "gone" && len(r.Streams) == 0 && r.End != nil && *r.End == end && r.TTL == time.Hour && r.SealedStep() == -1
		}},
		{"live", sums[1], func(r RunSummary) bool {
			return r.Run == "r" && r.End == nil && r.TTL == NoExpiry && len(r.Streams) == 1 && r.Streams[0].Head != nil &&
				r.SealedStep() == last.SealedStep() && r.Streams[0].Head.Pairs == last.Pairs() && r.Streams[0].TTL == NoExpiry &&
				r.StateBytes() == value+chunkBytes && r.StateBytes() > int64(16*last.Pairs())
		}},
		{"unknown", sums[2], func(r RunSummary) bool {
			return r.Run == "none" && len(r.Streams) == 0 && r.End == nil && r.TTL == 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.want(tc.got) {
				t.Fatalf("summary %+v (streams %+v); state value %d B, chunks %d B", tc.got, tc.got.Streams, value, chunkBytes)
			}
		})
	}
}
