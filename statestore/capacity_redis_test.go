package statestore

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

const (
	// capacityStreams (run, stream) states are written per benchmark iteration.
	capacityStreams = 32
	// capacitySteps: 330 steps of 16 anchor pairs fill the 5,000-pair window and slide it, so
	// Redis holds what it holds for a long-running stream: the kept steps and the chunks their
	// windows reach.
	capacitySteps = 330
	// capacityKeep is the consumer's default --keep-states (correct.DefaultKeepStates; that
	// package imports this one, so the value is repeated here).
	capacityKeep = 8
)

// BenchmarkCapacityRedisState measures the Redis memory one (run, stream) state with a full
// 5,000-pair window takes, on the real redis-server of WMRL_TEST_REDIS, for docs/capacity.md
// (bench/capacity.sh). Every step of every stream is written through Store.Write as the
// correction consumer writes it (a delta per step, the default 8 kept snapshots), under a
// prefix of its own; then MEMORY USAGE of every key under the prefix is summed. That is exact
// per key and unaffected by other clients of the same server, unlike INFO's used_memory, whose
// difference is reported as well as a cross-check (noisy on a shared server). The keys are
// deleted afterwards.
func BenchmarkCapacityRedisState(b *testing.B) {
	opts, err := redis.ParseURL(testenv.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() }) // after the prefixes' cleanups, which run first
	ctx := context.Background()
	corr, err := correction.New(correction.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var perState, usedPerState, keysPerState float64
	for b.Loop() {
		prefix := testenv.Name(b)
		b.Cleanup(func() { deletePrefix(b, rdb, prefix) })
		used0 := usedMemory(b, rdb)
		s := New(rdb, prefix, capacityKeep)
		states := make([]*correction.State, capacityStreams)
		for i := range states {
			states[i] = corr.NewState(fmt.Sprintf("run-%05d", i), "stream0")
		}
		for v := range capacitySteps {
			ws := make([]Write, len(states))
			newStreams := map[string][]string{}
			for i, st := range states {
				prev := st.TotalPairs()
				if _, err := corr.Advance(st, capacityStep(st, v), nil); err != nil {
					b.Fatal(err)
				}
				d := st.Digest()
				ws[i] = Write{Snap: &topics.CalibrationSnapshot{RunID: st.Run(), Stream: st.Stream(), Step: st.SealedStep(),
					State: st.EncodeHead(), Digest: hex.EncodeToString(d[:]), FitVersion: st.FitVersion(), Pairs: st.Pairs()},
					Chunks: WindowChunks(st, prev), State: st, Full: v == 0}
				if v == 0 {
					newStreams[st.Run()] = []string{st.Stream()}
				}
			}
			outs, err := s.Write(ctx, ws, newStreams)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range outs {
				if o.Status != Written {
					b.Fatalf("step %d of %s: status %d", v, o.Snap.RunID, o.Status)
				}
			}
		}
		if p := states[0].Pairs(); p != correction.DefaultConfig().Window {
			b.Fatalf("window holds %d pairs, want it full", p)
		}
		b.StopTimer()
		keys, bytes := prefixUsage(b, rdb, prefix)
		perState = float64(bytes) / capacityStreams
		keysPerState = float64(keys) / capacityStreams
		usedPerState = float64(usedMemory(b, rdb)-used0) / capacityStreams
		deletePrefix(b, rdb, prefix)
		b.StartTimer()
	}
	b.ReportMetric(perState, "redis-bytes/state")
	b.ReportMetric(keysPerState, "keys/state")
	b.ReportMetric(usedPerState, "used-memory-delta-bytes/state")
}

// capacityStep is step v of a live-like stream: 8 groups of 8 rollouts, 2 anchor groups (16
// pairs), scores from a hash of (run, step, group, rollout).
func capacityStep(st *correction.State, v int) correction.Step {
	groups := make([]correction.Group, 8)
	for g := range groups {
		groups[g] = correction.Group{ID: fmt.Sprintf("s%d-g%d", v, g), Anchor: g%4 == 0}
		for k := range 8 {
			h := fnv64(fmt.Sprintf("%s/%d/%d/%d", st.Run(), v, g, k))
			truth := float64(h>>11) / (1 << 53)
			r := correction.Rollout{ID: fmt.Sprintf("r%d", k), Predicted: correction.Reward{Score: 0.15 + 0.8*truth, OK: true}}
			if groups[g].Anchor {
				r.Executed = correction.Reward{Score: truth, OK: true}
			}
			groups[g].Rollouts = append(groups[g].Rollouts, r)
		}
	}
	return correction.Step{Run: st.Run(), Stream: st.Stream(), Step: int64(v), Groups: groups}
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// prefixUsage returns the number of keys under prefix and the sum of their MEMORY USAGE
// (SAMPLES 0: every element of an aggregate counted).
func prefixUsage(b *testing.B, rdb *redis.Client, prefix string) (int, int64) {
	b.Helper()
	ctx := context.Background()
	var n int
	var total int64
	it := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for it.Next(ctx) {
		u, err := rdb.MemoryUsage(ctx, it.Val(), 0).Result()
		if err != nil {
			b.Fatalf("MEMORY USAGE %s: %v", it.Val(), err)
		}
		n++
		total += u
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	return n, total
}

// usedMemory is INFO memory's used_memory.
func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}

// deletePrefix deletes every key under prefix.
func deletePrefix(b *testing.B, rdb *redis.Client, prefix string) {
	ctx := context.Background()
	it := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		b.Errorf("scan %s: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			b.Errorf("delete %s: %v", prefix, err)
		}
	}
}
