package statestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

func TestReadEnd(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	s := New(rdb, "p", 2)
	ctx := context.Background()

	if got, err := s.ReadEnd(ctx, "r1"); err != nil || got != nil {
		t.Fatalf("run without an end: got %+v, %v; want nil, nil", got, err)
	}
	want := RunEnd{LastStep: 41, EndedAt: time.UnixMilli(1_765_000_000_123).UTC(), Reason: topics.EndReasonIdle}
	if err := s.RecordEnd(ctx, "r1", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadEnd(ctx, "r1")
	if err != nil || got == nil || *got != want {
		t.Fatalf("ReadEnd = %+v, %v; want %+v", got, err, want)
	}
	if err := rdb.HSet(ctx, s.EndKey("r2"), endFieldLast, "x", endFieldAtMs, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadEnd(ctx, "r2"); err == nil {
		t.Fatal("ReadEnd of a malformed hash: no error")
	}
}

// ExpireRun gives every key of the run, and only of that run, a TTL: once it passes, Redis holds
// nothing of the run while another run's keys stay.
func TestExpireRun(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := New(rdb, "p", 3)
	ctx := context.Background()
	states := sealedStates(t, 40) // run "r", stream "s": several steps, chunks trimmed and kept
	for v, st := range states {
		var prev *correction.State
		if v > 0 {
			prev = states[v-1]
		}
		if _, err := s.Write(ctx, []Write{storeWrite(st, prev, v == 0)}, map[string][]string{"r": {"s"}}); err != nil {
			t.Fatal(err)
		}
	}
	// A second stream of the run and another run, written as plain keys of their layout.
	other := storeWrite(states[0], nil, true)
	other.Snap.RunID = "o"
	if _, err := s.Write(ctx, []Write{other}, map[string][]string{"o": {"s"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordEnd(ctx, "r", RunEnd{LastStep: 39, EndedAt: time.Now(), Reason: topics.EndReasonMarker}); err != nil {
		t.Fatal(err)
	}
	runKeys := func(run string) []string {
		var out []string
		for _, k := range mr.Keys() {
			if strings.HasPrefix(k, "p:{"+run+"}") || strings.HasPrefix(k, "p:{"+run+"/") {
				out = append(out, k)
			}
		}
		return out
	}
	before := runKeys("r")
	if len(before) < 8 {
		t.Fatalf("run r has only %d keys: %v", len(before), before)
	}
	if err := s.ExpireRun(ctx, "r", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, k := range before {
		if ttl := mr.TTL(k); ttl <= 0 || ttl > 2*time.Second {
			t.Errorf("key %s: TTL %v, want (0, 2s]", k, ttl)
		}
	}
	for _, k := range runKeys("o") {
		if ttl := mr.TTL(k); ttl != 0 {
			t.Errorf("key %s of another run got a TTL %v", k, ttl)
		}
	}
	mr.FastForward(3 * time.Second)
	if left := runKeys("r"); len(left) != 0 {
		t.Fatalf("keys of run r left after the TTL: %v", left)
	}
	if len(runKeys("o")) == 0 {
		t.Fatal("the other run's keys are gone")
	}
	// A run Redis holds nothing of expires without error.
	if err := s.ExpireRun(ctx, "gone", time.Second); err != nil {
		t.Fatal(err)
	}
}
