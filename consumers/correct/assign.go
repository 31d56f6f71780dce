package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// reload forgets all in-memory state and rebuilds it for the owned partitions: the changelog
// says which step each (run, stream) sealed last and its digest; Redis supplies that exact state
// when it matches, the snapshot's own bytes otherwise (and Redis is repaired).
func (c *Consumer) reload(ctx context.Context) error {
	c.waitRedis()
	parts := slices.Sorted(maps.Keys(c.owned()))
	c.eng.reset()
	start := time.Now()
	got, err := readChangelog(ctx, c.cfg.KafkaOpts, c.cfg.Names.Calibration(), parts, c.cfg.ChangelogTimeout, c.log)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(got))
	want := make([]*topics.CalibrationSnapshot, len(keys))
	for i, k := range keys {
		s := got[k].snap
		want[i] = &s
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fromRedis, rerr := c.store.load(lctx, want)
	if rerr != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis state load failed; using the changelog's snapshots", "err", rerr)
	}
	byRun := map[string][]*correction.State{}
	partOf := map[string]int32{}
	var repair []*topics.CalibrationSnapshot
	rebuilt := 0
	for i, sn := range want {
		var l loaded
		if fromRedis != nil {
			l = fromRedis[i]
		}
		reason := redisVerdict(sn, l)
		enc := l.state
		if reason != "" {
			enc = sn.State
			c.m.rebuilds.WithLabelValues(reason).Inc()
			if reason == "missing" {
				c.m.redisLost.Inc()
				c.log.Warn("redis lost the state of a stream (flushed or replaced?); rebuilt from the changelog", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step)
			}
			rebuilt++
			repair = append(repair, sn)
			c.log.Info("state rebuilt from the changelog", "run", sn.RunID, "stream", sn.Stream, "step", sn.Step, "reason", reason)
		}
		if sum := sha256.Sum256(enc); hex.EncodeToString(sum[:]) != sn.Digest {
			return fmt.Errorf("%w: snapshot %s/%s step %d: state bytes do not match its digest", ErrChangelog, sn.RunID, sn.Stream, sn.Step)
		}
		st, err := correction.DecodeState(enc)
		if err != nil {
			return fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
		}
		if st.Run() != sn.RunID || st.Stream() != sn.Stream || st.SealedStep() != sn.Step {
			return fmt.Errorf("%w: snapshot %s/%s step %d holds state of %s/%s step %d", ErrChangelog,
				sn.RunID, sn.Stream, sn.Step, st.Run(), st.Stream(), st.SealedStep())
		}
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
		}
		byRun[sn.RunID] = append(byRun[sn.RunID], st)
		partOf[sn.RunID] = got[keys[i]].part
	}
	for run, states := range byRun {
		if err := c.eng.install(run, partOf[run], states); err != nil {
			return err
		}
	}
	if len(repair) > 0 {
		res, err := c.store.writeForce(lctx, repair)
		if err != nil {
			c.m.redisErrors.Inc()
			c.log.Warn("redis repair failed", "err", err)
		} else {
			c.alarms(res)
		}
	}
	c.log.Info("state loaded", "partitions", parts, "streams", len(want), "runs", len(byRun), "rebuilt_from_changelog", rebuilt, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// redisVerdict says why Redis cannot supply sn's state ("" when it can).
func redisVerdict(sn *topics.CalibrationSnapshot, l loaded) string {
	switch {
	case l.head == nil && !l.has:
		return "missing"
	case l.head != nil && l.head.SealedStep < sn.Step:
		return "behind"
	case l.head != nil && l.head.SealedStep > sn.Step:
		return "ahead"
	case !l.has:
		return "missing"
	}
	sum := sha256.Sum256(l.state)
	if hex.EncodeToString(sum[:]) != sn.Digest {
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
