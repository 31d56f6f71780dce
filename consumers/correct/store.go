package correct

import (
	"context"
	"slices"
	"time"

	"github.com/wmrl/wmrl/statestore"
)

// writeRedisAsync writes the committed snapshots (and the ends of retired runs, retention.go) on a
// goroutine, then calls OnCommit, so the
// Redis round trip overlaps with polling and decoding the next records. At most one write is in
// flight (a new one waits for the previous, which keeps the writes in commit order), and
// waitRedis joins it before state is reloaded from Redis and before Run returns.
func (c *Consumer) writeRedisAsync(done []*sealed, infos []SealedStep, clog changelogOut) {
	c.waitRedis()
	ch := make(chan struct{})
	c.redisDone = ch
	go func() {
		defer close(ch)
		c.writeRedis(done)
		c.writeEnds(clog)
		if c.cfg.OnCommit != nil && len(infos) > 0 {
			c.cfg.OnCommit(infos)
		}
	}()
}

// waitRedis blocks until the Redis write in flight (if any) has finished.
func (c *Consumer) waitRedis() {
	if c.redisDone != nil {
		<-c.redisDone
		c.redisDone = nil
	}
}

// writeRedis stores the committed snapshots (one round trip). Failures only cost a rebuild
// from the changelog later; a differing digest for a stored step is an alarm. A step whose
// predecessor Redis does not hold (Redis lost its data) is written again with its whole window,
// and its run's streams set is re-added: a second round trip, only then.
func (c *Consumer) writeRedis(done []*sealed) {
	ws, newStreams := sealedWrites(done)
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.store.Write(ctx, ws, newStreams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis snapshot write failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
	var again []statestore.Write
	streams := map[string][]string{}
	for i, o := range res {
		if o.Status != statestore.NoBase {
			continue
		}
		w := ws[i]
		w.Full = true
		again = append(again, w)
		streams[w.Snap.RunID] = nil
	}
	if len(again) == 0 {
		return
	}
	// The run's streams set is re-added with every stream the run sealed, not only the ones
	// rewritten: on a cluster one shard can lose the set while other shards keep their streams.
	for _, w := range ws {
		if have, ok := streams[w.Snap.RunID]; ok && !slices.Contains(have, w.Snap.Stream) {
			streams[w.Snap.RunID] = append(have, w.Snap.Stream)
		}
	}
	c.m.redisLost.Add(float64(len(again)))
	c.log.Warn("redis does not hold the previous step of some streams (data lost?); writing their whole windows",
		"streams", len(again), "runs", len(streams))
	res, err = c.store.Write(ctx, again, streams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis full rewrite failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
}

// sealedWrites returns the Redis writes of sealed steps and their streams seen for the first time.
func sealedWrites(done []*sealed) ([]statestore.Write, map[string][]string) {
	var ws []statestore.Write
	newStreams := map[string][]string{}
	for _, s := range done {
		for i := range s.snaps {
			// A stream's first step has no predecessor in Redis; its chunks are its whole window.
			fresh := slices.Contains(s.newStream, s.snaps[i].Stream)
			ws = append(ws, statestore.Write{Snap: &s.snaps[i], Chunks: s.chunks[i], State: s.states[i], Full: fresh})
		}
		if len(s.newStream) > 0 {
			newStreams[s.run] = append(newStreams[s.run], s.newStream...)
		}
	}
	return ws, newStreams
}

func (c *Consumer) alarms(res []statestore.Outcome) {
	for _, o := range res {
		if o.Status == statestore.Differs {
			c.m.digestAlarms.Inc()
			c.log.Error("ALARM: Redis holds a different state for an already sealed step",
				"run", o.Snap.RunID, "stream", o.Snap.Stream, "step", o.Snap.Step,
				"digest", o.Snap.Digest, "redis_digest", o.Existing, "key", c.store.StateKey(o.Snap.RunID, o.Snap.Stream, o.Snap.Step))
		}
	}
}
