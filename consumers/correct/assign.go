package correct

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// reload forgets all in-memory state and rebuilds it for the owned partitions from the changelog
// (each (run, stream)'s latest snapshot and its window chunks), checking every state against the
// snapshot's digest. Redis is then compared with the changelog and repaired where it is missing,
// behind, ahead or different.
func (c *Consumer) reload(ctx context.Context) error {
	c.waitRedis()
	parts := slices.Sorted(maps.Keys(c.owned()))
	c.eng.reset()
	start := time.Now()
	got, err := readChangelog(ctx, c.cfg.KafkaOpts, c.cfg.Names, parts, c.cfg.ChangelogTimeout, c.log)
	if err != nil {
		return err
	}
	// Ended runs are not installed: their records are judged against their ends (runend.go), and
	// their keys wait for the retention's tombstones (retention.go).
	for _, run := range slices.Sorted(maps.Keys(got.ends)) {
		en := got.ends[run]
		c.eng.installEnded(en.end, en.part, got.slotsOf(run))
	}
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(got.states)) {
		if _, ended := got.ends[got.states[k].snap.RunID]; !ended {
			keys = append(keys, k)
		}
	}
	want := make([]*topics.CalibrationSnapshot, len(keys))
	byRun := map[string][]*correction.State{}
	partOf := map[string]int32{}
	rewrite := map[string][]string{}
	ws := make([]statestore.Write, len(keys))
	for i, k := range keys {
		e := got.states[k]
		sn := &e.snap
		want[i] = sn
		st, err := e.stateOf()
		if err != nil {
			return err
		}
		ws[i] = statestore.Write{Snap: sn, State: st, Full: true}
		if sn.ConfigHash != c.eng.hash {
			if !c.cfg.AllowConfigChange {
				return fmt.Errorf("%w: run %s stream %s (stored %s, running %s); restart with the original settings, or pass --allow-config-change to restart its calibration",
					ErrConfigChanged, sn.RunID, sn.Stream, short(sn.ConfigHash), short(c.eng.hash))
			}
			c.log.Warn("correction config changed: calibration of the stream restarts from an empty window", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step)
			st = c.corr.NewState(sn.RunID, sn.Stream)
			for v := int64(0); v <= sn.Step; v++ {
				if _, err := c.corr.Advance(st, correction.Step{Run: sn.RunID, Stream: sn.Stream, Step: v}, nil); err != nil {
					return fmt.Errorf("correct: restart calibration of %s/%s: %w", sn.RunID, sn.Stream, err)
				}
			}
			rewrite[sn.RunID] = append(rewrite[sn.RunID], sn.Stream)
		}
		byRun[sn.RunID] = append(byRun[sn.RunID], st)
		partOf[sn.RunID] = e.part
	}
	for run, states := range byRun {
		if err := c.eng.install(run, partOf[run], states); err != nil {
			return err
		}
		rb := c.eng.runs[run]
		rb.rewrite = map[string]bool{}
		for _, s := range rewrite[run] {
			rb.rewrite[s] = true
		}
	}
	rebuilt := c.repairRedis(ctx, want, ws)
	// The ended runs' ends and TTLs again, in case Redis missed them (down at retirement, flushed).
	var ended changelogOut
	for _, run := range slices.Sorted(maps.Keys(got.ends)) {
		ended.ends = append(ended.ends, got.ends[run].end)
	}
	c.writeEnds(ended)
	c.m.rebuildStates.Set(float64(len(want)))
	c.m.stateBytes.Set(float64(c.eng.stateBytes()))
	c.log.Info("state loaded", "partitions", parts, "streams", len(want), "runs", len(byRun), "ended_runs", len(got.ends),
		"redis_repaired", rebuilt, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// repairRedis compares Redis with the changelog's states and rewrites, with whole windows and
// the runs' streams sets, every (run, stream) it does not hold as the changelog does. It returns
// how many it rewrote; Redis failures are logged and counted, never fatal.
func (c *Consumer) repairRedis(ctx context.Context, want []*topics.CalibrationSnapshot, ws []statestore.Write) int {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fromRedis, err := c.store.Load(lctx, want)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis state load failed; not repairing it now", "err", err)
		return 0
	}
	var repair []statestore.Write
	streams := map[string][]string{}
	lost := 0
	for i, sn := range want {
		reason := redisVerdict(sn, fromRedis[i])
		if reason == "" {
			continue
		}
		if fromRedis[i].Head == nil && !fromRedis[i].Has {
			lost++
		}
		c.m.rebuilds.WithLabelValues(reason).Inc()
		repair = append(repair, ws[i])
		streams[sn.RunID] = append(streams[sn.RunID], sn.Stream)
		c.log.Info("redis state repaired from the changelog", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step, "reason", reason)
	}
	if lost > 0 {
		c.m.redisLost.Add(float64(lost))
		c.log.Warn("redis holds nothing for (run, stream)s the changelog has: its data was lost", "streams", lost)
	}
	if len(repair) == 0 {
		return 0
	}
	res, err := c.store.WriteForce(lctx, repair, streams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis repair failed", "err", err)
		return 0
	}
	c.alarms(res)
	return len(repair)
}

// redisVerdict says why Redis does not hold sn's state as the changelog does ("" when it does).
func redisVerdict(sn *topics.CalibrationSnapshot, l statestore.Loaded) string {
	switch {
	case l.Head == nil && !l.Has:
		return "missing"
	case l.Head != nil && l.Head.SealedStep < sn.Step:
		return "behind"
	case l.Head != nil && l.Head.SealedStep > sn.Step:
		return "ahead"
	case !l.Has:
		return "missing"
	}
	if string(l.State) != string(statestore.RedisValue(sn)) {
		return "mismatch"
	}
	return ""
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, as map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.inputs() {
		for _, p := range as[t] {
			c.assigned[p] = true
		}
	}
	c.changed = true
	c.log.Info("partitions assigned", "partitions", as)
}

func (c *Consumer) onRevoked(_ context.Context, _ *kgo.Client, rs map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.inputs() {
		for _, p := range rs[t] {
			delete(c.assigned, p)
		}
	}
	c.changed = true
	c.log.Info("partitions revoked", "partitions", rs)
}

// resetAssigned forgets the assignment of a closed session; the next session's callbacks set it.
func (c *Consumer) resetAssigned() {
	c.mu.Lock()
	c.assigned = map[int32]bool{}
	c.changed = true
	c.mu.Unlock()
}

func (c *Consumer) owned() map[int32]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.assigned)
}

func (c *Consumer) takeChanged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.changed
	c.changed = false
	return ch
}

func (c *Consumer) markChanged() {
	c.mu.Lock()
	c.changed = true
	c.mu.Unlock()
}
