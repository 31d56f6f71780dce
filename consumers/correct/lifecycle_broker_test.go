package correct

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// The "done when", on the real broker and a real redis-server, with a short retention:
// of three runs two end. wmrl_correct_active_runs returns to the live run and
// wmrl_correct_state_bytes drops; Redis records the ends; a fresh instance (a rebuild) within the
// retention installs only the live run's states and still dead-letters a late record of an ended
// run as run_ended; after the retention the changelog holds tombstones for every key of the
// ended runs, their Redis keys are gone (TTL) while the live run's stay, and a rebuild still
// installs only the live run's states. Every step is sealed exactly once with the reference
// digest, and a replay of an ended run gives its live digest.
func TestConsumerLifecycleOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	wl := SynthConfig{Runs: 3, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 1, Streams: 2, Seed: 17, RunPrefix: "l"}
	recs := flatten(synthOn(t, names, wl))
	testenv.Produce(t, seeds, recs)
	cc := smallCorrection()
	want := referenceRows(t, cc, retopic(recs, names))
	total := rollouts(wl)
	const retention = 6 * time.Second
	prefix := "lc" + strings.ReplaceAll(names.Prefix, ".", "")
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.RedisPrefix = prefix
	cfg.EndedRunRetention = retention
	store := statestore.New(rdb, prefix, 0)
	ctx := context.Background()
	start := func() (prometheus.Gatherer, func() error) {
		c := cfg
		c.Registry = prometheus.NewRegistry()
		return c.Registry, startConsumer(t, c)
	}
	waitFor := func(reg prometheus.Gatherer, what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (active runs %v, state bytes %v, run_ended %v, tombstoned %v, rebuild states %v)", what,
					metricSum(t, reg, "wmrl_correct_active_runs", nil), metricSum(t, reg, "wmrl_correct_state_bytes", nil),
					metricSum(t, reg, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}),
					metricSum(t, reg, "wmrl_correct_ended_runs_tombstoned_total", nil), metricSum(t, reg, "wmrl_correct_rebuild_states", nil))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	reg, stop := start()
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, total, 60*time.Second)
	waitFor(reg, "three active runs", 30*time.Second, func() bool { return metricSum(t, reg, "wmrl_correct_active_runs", nil) == 3 })
	bytes3 := metricSum(t, reg, "wmrl_correct_state_bytes", nil)

	last := int64(wl.Steps - 1)
	endedAt := time.Now().UTC()
	var ends []*kgo.Record
	for _, run := range []string{"l-0", "l-1"} {
		r, err := names.EndRequestRecord(run, last, endedAt)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, r)
	}
	testenv.Produce(t, seeds, ends)
	waitFor(reg, "one active run", 30*time.Second, func() bool { return metricSum(t, reg, "wmrl_correct_active_runs", nil) == 1 })
	bytes1 := metricSum(t, reg, "wmrl_correct_state_bytes", nil)
	t.Logf("state bytes: %v with 3 runs, %v with 1", bytes3, bytes1)
	if bytes1 <= 0 || bytes1 >= bytes3 {
		t.Fatalf("state bytes %v with three runs, %v after two ended: want a drop", bytes3, bytes1)
	}
	for _, run := range []string{"l-0", "l-1"} {
		// The end and its keys' TTL are two Redis calls (writeEnds): wait for both.
		waitFor(reg, "the end and its TTL in Redis", 10*time.Second, func() bool {
			e, err := store.ReadEnd(ctx, run)
			return err == nil && e != nil && rdb.PTTL(ctx, store.HeadKey(run, "stream0")).Val() > 0
		})
		e, _ := store.ReadEnd(ctx, run)
		if e.LastStep != last || e.Reason != topics.EndReasonMarker || !e.EndedAt.Equal(endedAt.Truncate(time.Millisecond)) {
			t.Fatalf("run %s: Redis end %+v, want step %d reason marker at %v", run, e, last, endedAt)
		}
		if ttl := rdb.PTTL(ctx, store.HeadKey(run, "stream0")).Val(); ttl <= 0 || ttl > retention {
			t.Fatalf("run %s: head TTL %v, want (0, %v]", run, ttl, retention)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A fresh instance within the retention: only the live run is installed; a late record of an
	// ended run is still run_ended.
	reg, stop = start()
	waitFor(reg, "the rebuild", 30*time.Second, func() bool { return metricSum(t, reg, "wmrl_correct_rebuild_states", nil) > 0 })
	if n := metricSum(t, reg, "wmrl_correct_rebuild_states", nil); n != float64(wl.Streams) {
		t.Fatalf("rebuild installed %v states, want the live run's %d", n, wl.Streams)
	}
	if time.Since(endedAt) >= retention {
		t.Fatalf("the rebuild came %v after the end, past the %v retention: the test machine is too slow for this check", time.Since(endedAt), retention)
	}
	late := manifestRecord(t, "l-1", last+1, 2, 2)
	late.Topic = names.Steps()
	testenv.Produce(t, seeds, []*kgo.Record{late})
	waitFor(reg, "the late record dead-lettered", 30*time.Second, func() bool {
		return metricSum(t, reg, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}) == 1
	})

	// After the retention: tombstones on the changelog, Redis keys gone.
	waitFor(reg, "the tombstones", retention+30*time.Second, func() bool {
		return metricSum(t, reg, "wmrl_correct_ended_runs_tombstoned_total", nil) == 2
	})
	waitFor(reg, "the ended runs' Redis keys to expire", 10*time.Second, func() bool {
		return len(rdb.Keys(ctx, prefix+":{l-0*").Val())+len(rdb.Keys(ctx, prefix+":{l-1*").Val()) == 0
	})
	if n := len(rdb.Keys(ctx, prefix+":{l-2*").Val()); n == 0 {
		t.Fatal("the live run's Redis keys are gone too")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	latest := map[string][]byte{}
	tombs := 0
	for _, r := range readTopic(t, seeds, names.Calibration()) {
		latest[string(r.Key)] = r.Value
		if r.Value == nil {
			tombs++
		}
	}
	for key, v := range latest {
		run, _, _ := strings.Cut(key, "/")
		if ended := run == "l-0" || run == "l-1"; ended != (v == nil) {
			t.Errorf("changelog key %q: latest value %d bytes (tombstone %v), want a tombstone iff its run ended", key, len(v), v == nil)
		}
	}
	if _, ok := latest["l-0"]; !ok || tombs == 0 {
		t.Fatalf("the changelog has no end record of l-0 or no tombstones (%d)", tombs)
	}
	t.Logf("changelog: %d keys, %d tombstones", len(latest), tombs)

	// A rebuild after the tombstones installs the live run alone.
	reg, stop = start()
	waitFor(reg, "the rebuild", 30*time.Second, func() bool { return metricSum(t, reg, "wmrl_correct_rebuild_states", nil) > 0 })
	if n := metricSum(t, reg, "wmrl_correct_rebuild_states", nil); n != float64(wl.Streams) {
		t.Fatalf("rebuild after the tombstones installed %v states, want %d", n, wl.Streams)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	checkLive(t, rd.rows, total, topics.DigestRows(want))
	res := replayRun(t, seeds, names, "l-1", cc)
	if w := topics.DigestRows(rowsOfRun(rd.rows, "l-1")); res.Digest != w || res.DeadLetters != 1 {
		t.Fatalf("replay of an ended run: %+v; want digest %s and the late record dead-lettered", res, w)
	}
}

// readTopic reads every committed record of topic, up to each partition's committed end (a read
// that stopped after a quiet spell returned nothing when the client was slow to its first fetch).
func readTopic(t *testing.T, seeds []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	start, err := topicread.Partitions(ctx, opts, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	if err := topicread.ToEnd(ctx, opts, start, time.Second, quietLogger(), func(r *kgo.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	return out
}

// On the real broker, --run-idle-timeout: a run whose trainer died in the middle of a step is
// ended by the consumer's own end-of-run record on the steps topic (reason idle, naming the last
// sealed step), the incomplete step's records are dead-lettered run_ended, the run is retired,
// Redis records the end as idle, and a replay of the input topics reads the record where the live
// consumer did and gives the live digest.
func TestConsumerIdleEndOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	wl := SynthConfig{Runs: 1, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 1, Streams: 1, Seed: 23, RunPrefix: "i"}
	steps := synthOn(t, names, wl)
	// Steps 0..2 complete; step 3 has its manifest and one reward: the trainer died.
	recs := flatten(steps[:3])
	input := append(recs, steps[3].Manifest, steps[3].Rewards[0])
	testenv.Produce(t, seeds, input)
	cc := correction.DefaultConfig()
	want := referenceRows(t, cc, retopic(recs, names))
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.RedisPrefix = "li" + strings.ReplaceAll(names.Prefix, ".", "")
	cfg.RunIdleTimeout = 2 * time.Second
	cfg.Registry = prometheus.NewRegistry()
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, len(want), 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for metricSum(t, cfg.Registry, "wmrl_correct_idle_ends_total", nil) != 1 ||
		metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil) != 0 ||
		metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("idle ends %v, active runs %v, run_ended dead letters %v; want 1, 0, 2",
				metricSum(t, cfg.Registry, "wmrl_correct_idle_ends_total", nil), metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil),
				metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_total", map[string]string{"reason": reasonRunEnded}))
		}
		time.Sleep(100 * time.Millisecond)
	}
	store := statestore.New(rdb, cfg.RedisPrefix, 0)
	deadline = time.Now().Add(10 * time.Second)
	for {
		e, err := store.ReadEnd(context.Background(), "i-0")
		if err == nil && e != nil {
			if e.Reason != topics.EndReasonIdle || e.LastStep != 2 {
				t.Fatalf("Redis end %+v, want idle at step 2", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no end in Redis: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var markers int
	for _, r := range readTopic(t, seeds, names.Steps()) {
		if v, _ := topics.HeaderValue(r.Headers, topics.HeaderEndReason); v == topics.EndReasonIdle {
			markers++
		}
	}
	if markers != 1 {
		t.Fatalf("%d idle end-of-run records on the steps topic, want 1", markers)
	}
	checkLive(t, rd.rows, len(want), topics.DigestRows(want))
	res := replayRun(t, seeds, names, "i-0", cc)
	if res.Digest != topics.DigestRows(rd.rows) || res.DeadLetters != 2 || res.Incomplete != 0 {
		t.Fatalf("replay: %+v; want the live digest, 2 dead letters, nothing incomplete", res)
	}
}
