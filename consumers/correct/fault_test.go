package correct

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// The fault tests run the consumer as a real subprocess (this test binary re-executed with
// childEnv set) against the real broker and Redis of internal/testenv, so SIGKILL really kills
// it mid-transaction.

const childEnv = "WMRL_CORRECT_CHILD"

type childConfig struct {
	Seeds       []string
	RedisURL    string
	Prefix      string
	Group       string
	TxnID       string
	InstanceID  string
	RedisPrefix string
	MetricsAddr string
	MinPairs    int
	Limits      Limits // zero fields: the defaults
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(childMain(raw))
	}
	os.Exit(m.Run())
}

func childMain(raw string) int {
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	target, err := conn.Options{RedisURL: cc.RedisURL}.RedisTarget()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := target.Client(false)
	defer rdb.Close()
	corr := correction.DefaultConfig()
	corr.MinPairs = cc.MinPairs
	c, err := NewConsumer(Config{
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cc.Seeds...)}, Redis: rdb, Names: topics.NewNames(cc.Prefix),
		Group: cc.Group, TransactionalID: cc.TxnID, InstanceID: cc.InstanceID, SessionTimeout: 10 * time.Second,
		Correction: corr, ChunkBytes: 4096, KeepStates: 4, RedisPrefix: cc.RedisPrefix, MetricsAddr: cc.MetricsAddr,
		TxnTimeout: 15 * time.Second, ProgressInterval: 2 * time.Second, Limits: cc.Limits,
		Logger: slogToStderr(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	return 0
}

// child is one consumer subprocess.
type child struct {
	cmd  *exec.Cmd
	done chan error
	log  string
}

func startChild(t *testing.T, cc childConfig, logName string) *child {
	t.Helper()
	raw, _ := json.Marshal(cc)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	path := filepath.Join(t.TempDir(), logName)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, done: make(chan error, 1), log: path}
	go func() { ch.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ch.done
		if t.Failed() || os.Getenv("WMRL_TEST_VERBOSE") != "" {
			b, _ := os.ReadFile(path)
			t.Logf("--- %s ---\n%s", logName, tail(string(b), 6000))
		}
	})
	return ch
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- errors.New("killed")
}

// wait returns the child's exit error after it exits by itself.
func (c *child) wait(timeout time.Duration) (error, bool) {
	select {
	case err := <-c.done:
		c.done <- err
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// faultEnv is one fault test's topics, Redis and workload.
type faultEnv struct {
	seeds    []string
	redisURL string
	names    topics.Names
	prefix   string
	steps    []SynthStep
	total    int
	minPairs int
}

func newFaultEnv(t *testing.T, wl SynthConfig) *faultEnv {
	t.Helper()
	seeds := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	prefix := testenv.Name(t) + "."
	names := topics.NewNames(prefix)
	brokerTopics(t, seeds, names)
	wl.RunPrefix = "r"
	steps, err := Synthesize(names, wl)
	if err != nil {
		t.Fatal(err)
	}
	return &faultEnv{seeds: seeds, redisURL: redisURL, names: names, prefix: prefix, steps: steps,
		total: rollouts(wl), minPairs: 8}
}

func (e *faultEnv) child(redisURL, txn, instance string) childConfig {
	return childConfig{Seeds: e.seeds, RedisURL: redisURL, Prefix: e.prefix, Group: e.prefix + "g", TxnID: txn,
		InstanceID: instance, RedisPrefix: e.prefix + "state", MinPairs: e.minPairs}
}

// wantDigest is the digest of an uninterrupted run: the naive reference over the same records.
func (e *faultEnv) wantDigest(t *testing.T) string {
	t.Helper()
	corr := correction.DefaultConfig()
	corr.MinPairs = e.minPairs
	return topics.DigestRows(referenceRows(t, corr, retopic(flatten(e.steps), e.names)))
}

// producePaced writes the workload step by step, each step's records shuffled, with a pause
// between steps so that the consumer works while faults are injected. extra runs after each step.
func (e *faultEnv) producePaced(t *testing.T, pause time.Duration, extra func(step int64, cl *kgo.Client, produced []*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(42, 43))
	byStep := map[int64][]*kgo.Record{}
	var order []int64
	for _, s := range e.steps {
		if _, ok := byStep[s.Step]; !ok {
			order = append(order, s.Step)
		}
		byStep[s.Step] = append(byStep[s.Step], s.Records()...)
	}
	for _, v := range order {
		recs := byStep[v]
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		cp := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		// extra runs between the two halves of the step, while the step is still open.
		half := len(cp) / 2
		for i, part := range [][]*kgo.Record{cp[:half], cp[half:]} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, part...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("produce step %d: %v", v, err)
				return
			}
			if i == 0 && extra != nil {
				extra(v, cl, recs[:half])
			}
		}
		time.Sleep(pause)
	}
}

// verify reads the advantages with read_committed and checks exactly-once and the digest.
func (e *faultEnv) verify(t *testing.T, timeout time.Duration) *advantageReader {
	t.Helper()
	rd := newAdvantageReader(t, e.seeds, e.names.Advantages(), true)
	rd.readUntil(t, e.total, timeout)
	// Linger briefly: a duplicate would show up as extra rows.
	rd.readUntil(t, e.total+1, 1500*time.Millisecond)
	checkLive(t, rd.rows, e.total, e.wantDigest(t))
	return rd
}

var faultWorkload = SynthConfig{Runs: 2, Steps: 12, Groups: 4, GroupSize: 4, AnchorEvery: 2, Streams: 2, FailEvery: 11, Seed: 99}

// (a) SIGKILL at random points, restart: exactly one row per rollout, digest of an uninterrupted run.
func TestFaultKillRestart(t *testing.T) {
	t.Parallel()
	e := newFaultEnv(t, faultWorkload)
	cc := e.child(e.redisURL, e.prefix+"tx", e.prefix+"member")
	var produced sync.WaitGroup
	produced.Add(1)
	go func() { defer produced.Done(); e.producePaced(t, 350*time.Millisecond, nil) }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	c := startChild(t, cc, "child-0.log")
	probe := newAdvantageReader(t, e.seeds, e.names.Advantages(), true)
	for kills < 4 {
		// Kill once some output exists (so state must be carried), at a random moment.
		probe.readUntil(t, (kills+1)*e.total/7, 30*time.Second)
		time.Sleep(time.Duration(rng.IntN(900)) * time.Millisecond)
		c.kill(t)
		kills++
		c = startChild(t, cc, fmt.Sprintf("child-%d.log", kills))
	}
	produced.Wait()
	rd := e.verify(t, 60*time.Second)
	t.Logf("kills=%d rows=%d advantage records=%d (read_committed), digest %s", kills, len(rd.rows), rd.recs, topics.DigestRows(rd.rows))
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err, ok := c.wait(20 * time.Second); !ok || err != nil {
		t.Fatalf("graceful stop after SIGTERM: exited=%v err=%v", ok, err)
	}
}

// (b) FLUSHALL mid-run (and again before a restart): state is rebuilt from the changelog.
func TestFaultRedisFlushAll(t *testing.T) {
	t.Parallel()
	e := newFaultEnv(t, faultWorkload)
	// A private redis-server: FLUSHALL on the shared one would wipe other tests' data.
	redisURL := privateRedis(t)
	ro, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	cc := e.child(redisURL, e.prefix+"tx", e.prefix+"member")
	var produced sync.WaitGroup
	produced.Add(1)
	go func() { defer produced.Done(); e.producePaced(t, 300*time.Millisecond, nil) }()

	c := startChild(t, cc, "child-0.log")
	probe := newAdvantageReader(t, e.seeds, e.names.Advantages(), true)
	probe.readUntil(t, e.total/4, 40*time.Second)
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	probe.readUntil(t, e.total/2, 30*time.Second)
	// Flush again and restart at once: the new process must rebuild everything from the changelog.
	c.kill(t)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cc.MetricsAddr = testenv.FreeAddr(t)
	startChild(t, cc, "child-1.log")
	produced.Wait()
	e.verify(t, 60*time.Second)
	rebuilt := scrape(t, cc.MetricsAddr, `wmrl_correct_state_rebuilds_total{reason="missing"}`)
	if rebuilt < 1 {
		t.Fatalf("state_rebuilds_total{reason=missing} = %v after FLUSHALL and restart", rebuilt)
	}
	if lost := scrape(t, cc.MetricsAddr, `wmrl_correct_redis_state_lost_total`); lost < 1 {
		t.Fatalf("redis_state_lost_total = %v after FLUSHALL and restart", lost)
	}
	// Redis was repaired and kept up: every (run, stream) head is at the last step, the state
	// assembled from its head and chunks has the head's digest, and the streams sets are back.
	checkStoreAtLastStep(t, statestore.New(rdb, cc.RedisPrefix, 4), faultWorkload)
	t.Logf("rebuilt (run, stream) states after FLUSHALL+restart: %v", rebuilt)
}

// (c) A second instance with the same transactional id fences the first: the fenced one stops
// with an error and nothing it produces after the fence is visible to read_committed readers.
func TestFaultFencedInstance(t *testing.T) {
	t.Parallel()
	e := newFaultEnv(t, faultWorkload)
	var produced sync.WaitGroup
	produced.Add(1)
	// The second half of the run is produced only once the second instance is up, so the first
	// still has work (and a transaction to attempt) after it has been fenced; otherwise it could
	// seal the whole backlog in one transaction and never learn of the fence.
	secondUp := make(chan struct{})
	gate := func(step int64, _ *kgo.Client, _ []*kgo.Record) {
		if step == int64(faultWorkload.Steps/2) {
			<-secondUp
		}
	}
	go func() { defer produced.Done(); e.producePaced(t, 300*time.Millisecond, gate) }()

	first := startChild(t, e.child(e.redisURL, e.prefix+"tx", e.prefix+"a"), "first.log")
	probe := newAdvantageReader(t, e.seeds, e.names.Advantages(), true)
	probe.readUntil(t, e.total/4, 40*time.Second)
	second := startChild(t, e.child(e.redisURL, e.prefix+"tx", e.prefix+"b"), "second.log")
	// The second instance logs its start after bumping the producer epoch (fencePredecessor).
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(second.log); strings.Contains(string(b), "correction consumer started") {
			break
		}
		if time.Now().After(deadline) {
			close(secondUp)
			t.Fatal("the second instance did not start within 40s")
		}
	}
	close(secondUp)
	err, exited := first.wait(45 * time.Second)
	if !exited {
		t.Fatal("the fenced instance kept running")
	}
	if err == nil {
		t.Fatal("the fenced instance exited cleanly; want an error")
	}
	b, _ := os.ReadFile(first.log)
	if !strings.Contains(strings.ToLower(string(b)), "fenced") && !strings.Contains(string(b), "INVALID_PRODUCER_EPOCH") {
		t.Fatalf("fenced instance's error does not say it was fenced:\n%s", tail(string(b), 2000))
	}
	produced.Wait()
	e.verify(t, 60*time.Second)
	// Per partition, once the second instance's epoch appears, no record of an older epoch follows.
	cl, err2 := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(e.names.Advantages(), e.names.Calibration()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err2 != nil {
		t.Fatal(err2)
	}
	defer cl.Close()
	maxEpoch := map[tp]int16{}
	n := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 && n > 0 {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			k := tp{r.Topic, r.Partition}
			if r.ProducerEpoch < maxEpoch[k] {
				t.Errorf("%s/%d offset %d: committed record of producer epoch %d after epoch %d", r.Topic, r.Partition, r.Offset, r.ProducerEpoch, maxEpoch[k])
			}
			maxEpoch[k] = max(maxEpoch[k], r.ProducerEpoch)
		})
	}
	_ = second
	t.Logf("fenced instance exit: %v; %d committed output records checked for epoch order", err, n)
}

// (d) Malformed, invalid and conflicting reward records go to the DLQ with reasons, exactly once;
// identical duplicates are dropped; the run completes with the clean digest.
func TestFaultDeadLetters(t *testing.T) {
	t.Parallel()
	e := newFaultEnv(t, faultWorkload)
	injected := map[string]int{}
	inject := func(step int64, cl *kgo.Client, produced []*kgo.Record) {
		if step%3 != 1 {
			return
		}
		var recs []*kgo.Record
		// Per run, a scored predicted reward among the records already produced for the step.
		byRun := map[string]*kgo.Record{}
		for _, r := range produced {
			if r.Topic != e.names.Predicted() || byRun[string(r.Key)] != nil {
				continue
			}
			if p, _ := topics.DecodePredicted(r.Value); p.Score != nil {
				byRun[string(r.Key)] = r
			}
		}
		for _, run := range []string{"r-0", "r-1"} {
			orig := byRun[run]
			if orig == nil {
				t.Errorf("step %d: no scored predicted reward of %s in the first half", step, run)
				return
			}
			p, _ := topics.DecodePredicted(orig.Value)
			// Identical redelivery: dropped, counted.
			recs = append(recs, &kgo.Record{Topic: orig.Topic, Key: orig.Key, Value: orig.Value, Headers: orig.Headers})
			// Conflicting duplicate: same rollout, another score.
			other := 1 - *p.Score
			p.Score = &other
			c, _ := e.names.PredictedRecord(p)
			recs = append(recs, c)
			injected["conflict"]++
			// Malformed JSON, keyed by the run.
			recs = append(recs, &kgo.Record{Topic: e.names.Predicted(), Key: []byte(run), Value: []byte(`{"schema":"wmrl.reward.predicted.v1",`)})
			injected["malformed-json"]++
			// Valid JSON, invalid content: a score outside [0,1].
			bad := strings.Replace(string(orig.Value), `"score":`, `"score":7`, 1)
			recs = append(recs, &kgo.Record{Topic: e.names.Predicted(), Key: []byte(run), Value: []byte(bad)})
			injected["invalid-field:score"]++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	c := startChild(t, e.child(e.redisURL, e.prefix+"tx", e.prefix+"member"), "child.log")
	e.producePaced(t, 100*time.Millisecond, inject)
	e.verify(t, 60*time.Second)
	// Read the DLQ (read_committed): each injected bad record exactly once, with its reason.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(e.names.DLQ()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := 0
	for _, n := range injected {
		want += n
	}
	got := map[string]int{}
	seen := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	total := 0
	for time.Now().Before(deadline) && total < want+1 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			d, err := topics.ParseDeadLetter(r)
			if err != nil {
				t.Fatal(err)
			}
			key := d.SourceTopic + "/" + strconv.Itoa(int(d.SourcePartition)) + "/" + strconv.FormatInt(d.SourceOffset, 10)
			if seen[key] {
				t.Errorf("dead letter for %s twice", key)
			}
			seen[key] = true
			if d.Stage != "correct" || d.Error == "" {
				t.Errorf("dead letter %+v", d)
			}
			got[d.Reason]++
			total++
		})
		if total >= want {
			// Linger for a possible duplicate.
			deadline = minTime(deadline, time.Now().Add(1500*time.Millisecond))
		}
	}
	for reason, n := range injected {
		if got[reason] != n {
			t.Errorf("dead letters with reason %s: %d, want %d (all: %v)", reason, got[reason], n, got)
		}
	}
	if total != want {
		t.Errorf("%d dead letters, want %d", total, want)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err, ok := c.wait(20 * time.Second); !ok || err != nil {
		t.Fatalf("graceful stop: exited=%v err=%v", ok, err)
	}
	b, _ := os.ReadFile(c.log)
	if !strings.Contains(string(b), "dead_letters="+strconv.Itoa(want)) {
		t.Errorf("final progress line does not report %d dead letters:\n%s", want, tail(string(b), 1500))
	}
	t.Logf("dead letters by reason: %v", got)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// privateRedis starts a redis-server on a free port for this test.
func privateRedis(t *testing.T) string {
	t.Helper()
	testenv.NeedBinaries(t, "redis-server")
	addr := testenv.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "redis://" + addr + "/0"
	ro, _ := redis.ParseURL(url)
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	for i := 0; ; i++ {
		if rdb.Ping(context.Background()).Err() == nil {
			return url
		}
		if i > 100 {
			t.Fatal("private redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape reads one sample (exact series text) from a /metrics endpoint, 0 if absent.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	var last error
	for i := 0; i < 50; i++ {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			last = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, series+" ") {
				v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
				return v
			}
		}
		return 0
	}
	t.Fatalf("scrape %s: %v", addr, last)
	return 0
}

func slogToStderr() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
