package correct

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// TestWriteRedisAfterPartialLoss: one shard of a cluster loses its data (here: a run's streams
// set and one stream's keys, the other stream's keys survive). The next step's write finds no
// predecessor for the lost stream, rewrites its window, and re-adds every stream of the run to
// the streams set, not only the rewritten one.
func TestWriteRedisAfterPartialLoss(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	names := topics.NewNames("loss.")
	c, err := NewConsumer(testConsumerConfig([]string{"127.0.0.1:1"}, names, rdb, correction.DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	corr, err := correction.New(correction.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	streams := []string{"s0", "s1"}
	states := map[string]*correction.State{}
	for _, s := range streams {
		states[s] = corr.NewState("r", s)
	}
	seal := func(v int64) *sealed {
		out := &sealed{run: "r", step: v}
		if v == 0 {
			out.newStream = streams
		}
		for _, s := range streams {
			prev := states[s].TotalPairs()
			g := correction.Group{ID: "g", Anchor: true}
			for k := range 4 {
				x := float64(int(v)*3+k) / 10
				g.Rollouts = append(g.Rollouts, correction.Rollout{ID: fmt.Sprintf("x%d", k),
					Predicted: correction.Reward{Score: x, OK: true}, Executed: correction.Reward{Score: x / 2, OK: true}})
			}
			_, st, err := corr.Correct(states[s], correction.Step{Run: "r", Stream: s, Step: v, Groups: []correction.Group{g}})
			if err != nil {
				t.Fatal(err)
			}
			states[s] = st
			d := st.Digest()
			out.snaps = append(out.snaps, topics.CalibrationSnapshot{RunID: "r", Stream: s, Step: v, State: st.EncodeHead(),
				Digest: hex.EncodeToString(d[:]), FitVersion: st.FitVersion(), Pairs: st.Pairs()})
			out.chunks = append(out.chunks, statestore.WindowChunks(st, prev))
			out.states = append(out.states, st)
		}
		return out
	}
	ctx := context.Background()
	c.writeRedis([]*sealed{seal(0)})
	c.writeRedis([]*sealed{seal(1)})
	// The shard holding the run's set and s0's keys loses its data.
	keys, err := rdb.Keys(ctx, "*{r/s0}*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of s0: %v %v", keys, err)
	}
	if err := rdb.Del(ctx, append(keys, c.store.StreamsKey("r"))...).Err(); err != nil {
		t.Fatal(err)
	}
	c.writeRedis([]*sealed{seal(2)})
	got, err := c.store.Streams(ctx, "r")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, streams) {
		t.Fatalf("streams set after the partial loss: %v %v, want %v", got, err, streams)
	}
	for _, s := range streams {
		h, err := c.store.ReadHead(ctx, "r", s)
		if err != nil || h.SealedStep != 2 {
			t.Fatalf("head of %s: %+v %v", s, h, err)
		}
		if _, err := c.store.ReadState(ctx, "r", s, 2); err != nil {
			t.Fatalf("state of %s: %v", s, err)
		}
	}
}
