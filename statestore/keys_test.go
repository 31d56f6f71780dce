package statestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/wmrl/wmrl/topics"
)

// The key bytes, as doc.go lays them out, of what a write (Go and write.lua) and a recorded end
// leave in Redis: the keys of (run, stream) under {run/stream}, the run's under {run}.
func TestKeyLayout(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := New(rdb, "p", 3)
	ctx := context.Background()
	states := sealedStates(t, 40)
	for v, st := range states {
		w := storeWrite(st, nil, true)
		if v > 0 {
			w = storeWrite(st, states[v-1], false)
		}
		if _, err := s.Write(ctx, []Write{w}, map[string][]string{"r": {"s"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordEnd(ctx, "r", RunEnd{LastStep: 39, EndedAt: time.UnixMilli(1), Reason: topics.EndReasonIdle}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p:{r/s}:chunk:1", "p:{r/s}:chunk:2", "p:{r/s}:chunk:3", "p:{r/s}:chunks", "p:{r/s}:head",
		"p:{r/s}:lows", "p:{r/s}:state:37", "p:{r/s}:state:38", "p:{r/s}:state:39", "p:{r/s}:steps",
		"p:{r}:end", "p:{r}:streams",
	}
	if got := mr.Keys(); !slices.Equal(got, want) {
		t.Fatalf("keys\n %q\nwant\n %q", got, want)
	}
	if runs, err := s.ListRuns(ctx); err != nil || !slices.Equal(runs, []string{"r"}) {
		t.Fatalf("ListRuns = %v, %v", runs, err)
	}
}
