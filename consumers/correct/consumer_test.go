package correct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

const testPartitions = 3

func quietLogger() *slog.Logger {
	if os.Getenv("WMRL_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func fakeCluster(t *testing.T, names topics.Names) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(testPartitions, names.All()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// advantageReader reads the advantages topic with read_committed from the start.
type advantageReader struct {
	cl     *kgo.Client
	rows   []topics.AdvantageRow
	chunks map[string]int // run/step -> chunks seen
	recs   int
}

func newAdvantageReader(t *testing.T, seeds []string, topic string, committed bool) *advantageReader {
	t.Helper()
	iso := kgo.ReadCommitted()
	if !committed {
		iso = kgo.ReadUncommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &advantageReader{cl: cl, chunks: map[string]int{}}
}

// readUntil polls until want rows were read or the timeout passes.
func (a *advantageReader) readUntil(t *testing.T, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(a.rows) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := a.cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			rows, err := topics.DecodeAdvantageRecord(r)
			if err != nil {
				t.Fatalf("advantage record %d: %v", r.Offset, err)
			}
			run, _ := topics.HeaderValue(r.Headers, topics.HeaderRun)
			step, _ := topics.HeaderValue(r.Headers, topics.HeaderStep)
			n, _ := topics.HeaderValue(r.Headers, topics.HeaderRows)
			if strconv.Itoa(len(rows)) != n {
				t.Fatalf("wmrl-rows %s but %d rows", n, len(rows))
			}
			if string(r.Key) != run {
				t.Fatalf("key %q, run header %q", r.Key, run)
			}
			a.chunks[run+"/"+step]++
			a.recs++
			a.rows = append(a.rows, rows...)
		})
	}
}

// checkExactlyOnce fails unless every rollout of recs has exactly one row.
// checkLive checks the rows read live: one per rollout (total) and the reference digest (want).
func checkLive(t *testing.T, rows []topics.AdvantageRow, total int, want string) {
	t.Helper()
	checkExactlyOnce(t, rows, total)
	if got := topics.DigestRows(rows); got != want {
		t.Fatalf("live digest %s, want %s", got, want)
	}
}

// replayRun replays run from the input topics with cc, discarding the rows.
func replayRun(t *testing.T, seeds []string, names topics.Names, run string, cc correction.Config) ReplayResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Replay(ctx, ReplayConfig{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Run: run,
		Correction: cc, Logger: quietLogger()}, func(int64, []topics.AdvantageRow) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func checkExactlyOnce(t *testing.T, rows []topics.AdvantageRow, want int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.RunID+"|"+strconv.FormatInt(r.Step, 10)+"|"+r.RolloutID]++
	}
	var dups int
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	if len(seen) != want || dups > 0 || len(rows) != want {
		t.Fatalf("%d rows for %d distinct rollouts (%d duplicated); want exactly %d", len(rows), len(seen), dups, want)
	}
}

func testConsumerConfig(seeds []string, names topics.Names, rdb redis.UniversalClient, corr correction.Config) Config {
	return Config{
		KafkaOpts:       []kgo.Opt{kgo.SeedBrokers(seeds...)},
		Redis:           rdb,
		Names:           names,
		Group:           "g-" + names.Prefix,
		TransactionalID: "tx-" + names.Prefix,
		Correction:      corr,
		ChunkBytes:      4096, // small, so that steps span several chunks
		KeepStates:      3,
		Logger:          quietLogger(),
		TxnTimeout:      10 * time.Second,
	}
}

func startConsumer(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	c, err := NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("consumer did not stop")
		}
	}
}

func TestConsumerEndToEndWithReplay(t *testing.T) {
	names := topics.NewNames("e2e.")
	seeds := fakeCluster(t, names)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	wl := SynthConfig{Runs: 3, Steps: 5, Groups: 4, GroupSize: 8, AnchorEvery: 2, Streams: 2, FailEvery: 9, Seed: 21}
	steps, err := Synthesize(names, wl)
	if err != nil {
		t.Fatal(err)
	}
	// Phase 1: steps 0-2 complete plus part of step 3 (buffered, unsealed, when the consumer
	// stops: its offsets must not be committed). Phase 2: the rest. Each phase is shuffled
	// across topics and runs.
	var first, second []*kgo.Record
	for _, s := range steps {
		recs := s.Records()
		switch {
		case s.Step < 3:
			first = append(first, recs...)
		case s.Step == 3:
			first = append(first, recs[:len(recs)/2]...)
			second = append(second, recs[len(recs)/2:]...)
		default:
			second = append(second, recs...)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	rng.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
	recs := append(slices.Clone(first), second...)
	cc := smallCorrection()
	want := topics.DigestRows(referenceRows(t, cc, retopic(recs, names)))
	total := rollouts(wl)
	perStep := wl.Groups * wl.GroupSize

	testenv.Produce(t, seeds, first)
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, 3*wl.Runs*perStep, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(rd.rows) != 3*wl.Runs*perStep {
		t.Fatalf("phase 1: %d rows, want %d", len(rd.rows), 3*wl.Runs*perStep)
	}
	testenv.Produce(t, seeds, second)
	cfg.Registry = nil
	stop = startConsumer(t, cfg)
	rd.readUntil(t, total, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkLive(t, rd.rows, total, want)
	if rd.recs <= wl.Runs*wl.Steps {
		t.Fatalf("%d advantage records for %d steps: chunking below 4 KiB should split steps", rd.recs, wl.Runs*wl.Steps)
	}

	// Redis holds the head of every (run, stream) at the last step, with the changelog's digest.
	store := statestore.New(rdb, DefaultRedisPrefix, 3)
	ctx := context.Background()
	for r := 0; r < wl.Runs; r++ {
		run := fmt.Sprintf("run-%d", r)
		streams, err := store.Streams(ctx, run)
		if err != nil || len(streams) != wl.Streams {
			t.Fatalf("streams of %s: %v %v", run, streams, err)
		}
		for _, s := range streams {
			h, err := store.ReadHead(ctx, run, s)
			if err != nil {
				t.Fatal(err)
			}
			if h.SealedStep != int64(wl.Steps-1) {
				t.Fatalf("%s/%s head at step %d", run, s, h.SealedStep)
			}
			b, err := store.ReadState(ctx, run, s, h.SealedStep)
			if err != nil {
				t.Fatal(err)
			}
			st, err := correction.DecodeState(b)
			if err != nil {
				t.Fatal(err)
			}
			d := st.Digest()
			if fmt.Sprintf("%x", d) != h.Digest {
				t.Fatalf("%s/%s head digest %s, state digest %x", run, s, h.Digest, d)
			}
			// Only the last KeepStates=3 snapshots are kept.
			if _, err := store.ReadState(ctx, run, s, h.SealedStep-3); !errors.Is(err, redis.Nil) {
				t.Fatalf("state %d not trimmed: %v", h.SealedStep-3, err)
			}
			if _, err := store.ReadState(ctx, run, s, h.SealedStep-2); err != nil {
				t.Fatalf("state %d trimmed too early: %v", h.SealedStep-2, err)
			}
		}
	}

	// Replay each run into a file and compare digests with the live rows.
	var all []topics.AdvantageRow
	for r := 0; r < wl.Runs; r++ {
		run := fmt.Sprintf("run-%d", r)
		path := filepath.Join(t.TempDir(), run+".arrows")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := topics.NewReplayWriter(f)
		res, err := Replay(ctx, ReplayConfig{
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Run: run, Correction: cc,
			Redis: rdb, RedisPrefix: "replay-" + run, StatePrefix: DefaultRedisPrefix, Logger: quietLogger(),
		}, func(_ int64, rows []topics.AdvantageRow) error { return w.WriteRows(rows, 4096) })
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if res.Steps != wl.Steps || res.Incomplete != 0 {
			t.Fatalf("replay %s: %+v", run, res)
		}
		rows, err := topics.ReadReplayFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var live []topics.AdvantageRow
		for _, lr := range rd.rows {
			if lr.RunID == run {
				live = append(live, lr)
			}
		}
		if topics.DigestRows(rows) != topics.DigestRows(live) || res.Digest != topics.DigestRows(live) {
			t.Fatalf("replay %s digest %s (file %s), live %s", run, res.Digest, topics.DigestRows(rows), topics.DigestRows(live))
		}
		// The replay wrote its states to its own namespace, equal to the live ones.
		rh, err := statestore.New(rdb, "replay-"+run, 3).ReadHead(ctx, run, "stream0")
		if err != nil {
			t.Fatal(err)
		}
		lh, _ := store.ReadHead(ctx, run, "stream0")
		if rh.Digest != lh.Digest {
			t.Fatalf("replayed state digest %s, live %s", rh.Digest, lh.Digest)
		}
		all = append(all, rows...)
	}
	if topics.DigestRows(all) != want {
		t.Fatal("replayed rows of all runs differ from the reference")
	}

	// Replay from offsets: skip the first records of the run's partition and resume from the
	// live namespace's state after step 2.
	run := "run-0"
	res, err := Replay(ctx, ReplayConfig{
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Run: run, Correction: cc, FromStep: 3,
		FromOffsets: map[string]int64{names.Steps(): 0, names.Predicted(): 0, names.Executed(): 0},
		Redis:       rdb, RedisPrefix: "replay2", StatePrefix: DefaultRedisPrefix, Logger: quietLogger(),
	}, func(int64, []topics.AdvantageRow) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var tail []topics.AdvantageRow
	for _, lr := range rd.rows {
		if lr.RunID == run && lr.Step >= 3 {
			tail = append(tail, lr)
		}
	}
	if res.FirstStep != 3 || res.Digest != topics.DigestRows(tail) {
		t.Fatalf("replay from state 2: %+v, live tail digest %s", res, topics.DigestRows(tail))
	}
}

// retopic maps records built for one prefix onto testNames so referenceRows can read them.
func retopic(recs []*kgo.Record, from topics.Names) []*kgo.Record {
	m := map[string]string{from.Steps(): testNames.Steps(), from.Predicted(): testNames.Predicted(), from.Executed(): testNames.Executed()}
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Topic = m[r.Topic]
		out[i] = &c
	}
	return out
}

func TestConsumerConfigChangeStops(t *testing.T) {
	names := topics.NewNames("cfg.")
	seeds := fakeCluster(t, names)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	steps, err := Synthesize(names, SynthConfig{Runs: 1, Steps: 2, Groups: 2, GroupSize: 2, AnchorEvery: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, seeds, flatten(steps))
	cfg := testConsumerConfig(seeds, names, rdb, correction.DefaultConfig())
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, 8, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cfg.Correction = correction.ReferenceConfig()
	cfg.Registry = nil
	c, err := NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, ErrConfigChanged) {
		t.Fatalf("Run with another config: %v, want ErrConfigChanged", err)
	}
}
