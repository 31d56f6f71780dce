//go:build soak

package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// shape is one soak's size. Time is compressed: a run's steps are tick apart, not minutes.
type shape struct {
	mode string
	// runs start and end in all; concurrent are in flight at any time.
	runs, concurrent                  int
	steps, groups, groupSize, streams int
	tick                              time.Duration // between two steps of a run
	sample                            time.Duration // between two samples
	// retention is --ended-run-retention (and a tenth of --run-idle-timeout's scale) when the
	// binary has the flag: in compressed time, a few seconds stand for days.
	retention time.Duration
	// faults fire in order once this share of the runs has ended. A restart of the correct
	// processes resets what they leak, so the last restart comes well before the last window
	// (see report_test.go), which must see what the processes accumulate.
	faults []fault
	// replays is how many runs, besides those in flight at each fault, are replayed.
	replays int
}

type fault struct {
	at   float64
	name string
}

const (
	faultBrokers = "rolling-broker-restart"
	faultRedis   = "redis-cluster-failover"
	faultCorrect = "rolling-correct-restart"
	// faultRebalance stops one correct instance (it leaves the group: the other two take its
	// partitions and rebuild their state in their long-lived processes) and starts it again
	// (another rebalance): late in the soak, where a rebuild that read every run ever seen would
	// be largest.
	faultRebalance = "rebalance"
)

// shapeFor reads WMRL_SOAK (short or full) and WMRL_SOAK_RUNS (overrides the run count).
func shapeFor(t *testing.T) shape {
	s := shape{mode: "short", runs: 200, concurrent: 10, steps: 4, groups: 4, groupSize: 4, streams: 2,
		tick: 800 * time.Millisecond, sample: 2 * time.Second, retention: 5 * time.Second, replays: 3,
		faults: []fault{{0.03, faultCorrect}, {0.06, faultBrokers}, {0.5, faultRedis}, {0.8, faultRebalance}}}
	if os.Getenv("WMRL_SOAK") == "full" {
		s = shape{mode: "full", runs: 1200, concurrent: 16, steps: 6, groups: 4, groupSize: 4, streams: 2,
			tick: 1200 * time.Millisecond, sample: 4 * time.Second, retention: 15 * time.Second, replays: 12,
			faults: []fault{{0.03, faultCorrect}, {0.06, faultBrokers}, {0.3, faultRedis}, {0.4, faultRebalance},
				{0.5, faultCorrect}, {0.6, faultBrokers}, {0.7, faultRedis}, {0.85, faultRebalance}}}
	}
	if v := os.Getenv("WMRL_SOAK_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 20 {
			t.Fatalf("WMRL_SOAK_RUNS=%q: want a number ≥ 20", v)
		}
		s.runs = n
	}
	return s
}

func TestSoak(t *testing.T) {
	sh := shapeFor(t)
	h := newHarness(t, sh)
	start := time.Now()
	h.topics()
	for i := range 3 {
		h.startCorrect(i)
	}
	for i := range 3 {
		h.waitReady(i, 2*time.Minute)
	}
	w := newFleet(h)
	smp := newSampler(h, w)
	smp.dumpRedisMemory(context.Background(), filepath.Join(h.out, "logs", "redis-memory-start.txt"))
	stopSampling := smp.run()
	stopFollow := w.follow()
	produced := make(chan struct{})
	go func() { defer close(produced); w.produce() }()
	h.faults(w)
	<-produced
	w.waitAllEnded(5 * time.Minute)
	h.dumpMetrics()
	// Samples after the last run ended show where the footprint settles once nothing is live.
	time.Sleep(3 * sh.sample)
	inv := smp.inventory(context.Background())
	smp.dumpRedisMemory(context.Background(), filepath.Join(h.out, "logs", "redis-memory-end.txt"))
	stopSampling()
	time.Sleep(2 * time.Second) // a late duplicate would arrive here
	stopFollow()
	elapsed := time.Since(start)
	rep := report{shape: sh, elapsed: elapsed, lifecycle: h.lifecycle, samples: smp.samples(), rebuilds: smp.rebuildEvents(),
		faults: h.faultLog, keys: inv, exact: w.exactlyOnce(), replays: w.replayDigests(t, sh.replays, h.faultRuns)}
	rep.judge()
	if err := rep.write(h.out); err != nil {
		t.Errorf("writing the soak's output: %v", err)
	}
	t.Logf("soak %s: %d runs ended in %v; output in %s\n%s", sh.mode, w.endedNow(), elapsed.Round(time.Second), h.out, rep.text())
	for _, f := range rep.failures {
		t.Error(f)
	}
}

// harness owns the cluster, the Redis Cluster, the wmrl binary and the correct processes.
type harness struct {
	t          *testing.T
	sh         shape
	bin, out   string
	kafka      *testenv.KafkaCluster
	redis      *testenv.RedisHA
	redisPorts []int
	names      topics.Names
	prefix     string
	lifecycle  bool // the binary has --ended-run-retention
	mu         sync.Mutex
	procs      []*proc // the correct instances now running, by index
	metrics    []string
	faultLog   []faultEvent
	faultRuns  []string // runs in flight when a fault began (replayed)
}

// faultEvent is one fault's span, in time and in ended runs.
type faultEvent struct {
	name               string
	start, end         time.Time
	endedAt, endedDone int
}

func newHarness(t *testing.T, sh shape) *harness {
	out := os.Getenv("WMRL_SOAK_OUT")
	if out == "" {
		out = filepath.Join(testenv.RepoRoot(t), ".local", "soak", time.Now().UTC().Format("20060102T150405Z")+"-"+sh.mode)
	}
	if err := os.MkdirAll(filepath.Join(out, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, sh: sh, out: out, prefix: "soak.",
		names: topics.NewNames("soak."), procs: make([]*proc, 3), metrics: make([]string, 3)}
	t.Logf("soak %s: %d runs, %d in flight, %d steps of %d groups × %d; output in %s", sh.mode, sh.runs, sh.concurrent,
		sh.steps, sh.groups, sh.groupSize, out)
	h.bin = testenv.BuildWMRL(t, t.TempDir())
	help, _ := exec.Command(h.bin, "correct", "--help").CombinedOutput()
	h.lifecycle = strings.Contains(string(help), "--ended-run-retention")
	h.kafka = testenv.StartKafkaCluster(t)
	h.redis = testenv.StartRedisHA(t, "cluster")
	for i := range 6 {
		h.redisPorts = append(h.redisPorts, h.redis.Base+i)
	}
	// Registered after the cluster's and Redis's stops, so it runs before them.
	t.Cleanup(func() {
		procs, _ := h.instances()
		for _, p := range procs {
			if p != nil {
				p.terminate(t, 60*time.Second)
			}
		}
	})
	return h
}

// topics creates the wmrl topics (replication factor 3) and compresses the calibration
// changelog's time: segments roll every few seconds and the cleaner drops tombstones soon, so
// what compaction keeps is visible within the soak (with the defaults, a week-long segment
// would hide it).
func (h *harness) topics() {
	h.wmrl(2*time.Minute, "topics", "create", "--partitions", "3", "--replication-factor", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := func(s string) *string { return &s }
	roll := strconv.FormatInt((h.sh.retention / 2).Milliseconds(), 10)
	res, err := h.kafka.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "segment.ms", Value: v(roll)},
		{Name: "min.cleanable.dirty.ratio", Value: v("0.01")},
		{Name: "delete.retention.ms", Value: v(roll)},
		{Name: "min.compaction.lag.ms", Value: v("0")},
	}, h.names.Calibration())
	if err == nil {
		for _, r := range res {
			err = r.Err
		}
	}
	if err != nil {
		h.t.Fatalf("compressing the calibration topic's time: %v", err)
	}
}

func (h *harness) global() []string {
	return []string{"--brokers", strings.Join(h.kafka.Seeds, ","), "--redis", h.redis.URL, "--topic-prefix", h.prefix, "--log-format", "json"}
}

func (h *harness) wmrl(timeout time.Duration, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append(h.global(), args...)...)
	cmd.Env = testenv.StageEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("wmrl %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// correctArgs are instance i's flags: a stable transactional and instance id, so a restart takes
// its partitions back. With the lifecycle flags, ended runs are retired after the retention.
func (h *harness) correctArgs(i int) []string {
	addr := testenv.FreeAddr(h.t)
	h.metrics[i] = "http://" + addr
	args := []string{"correct", "--metrics-addr", addr, "--group", h.prefix + "correct",
		"--transactional-id", fmt.Sprintf("%scorrect-%d", h.prefix, i), "--instance-id", fmt.Sprintf("%scorrect-%d", h.prefix, i),
		"--session-timeout", "10s", "--redis-prefix", "soak", "--min-pairs", strconv.Itoa(minPairs), "--window", strconv.Itoa(window),
		"--progress-interval", "5s"}
	if h.lifecycle {
		args = append(args, "--ended-run-retention", h.sh.retention.String(), "--run-idle-timeout", (20 * h.sh.retention).String())
	}
	return args
}

// The correction settings of the correct instances, which a replay must share.
const (
	minPairs = 8
	window   = 256
)

func (h *harness) startCorrect(i int) {
	f, err := os.OpenFile(filepath.Join(h.out, "logs", fmt.Sprintf("correct-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	args := h.correctArgs(i)
	cmd := exec.Command(h.bin, append(h.global(), args...)...)
	cmd.Env = testenv.StageEnv()
	cmd.Stdout, cmd.Stderr = f, f
	p := &proc{Proc: testenv.StartProc(h.t, fmt.Sprintf("correct-%d", i), cmd), log: f}
	go func() { <-p.Done; f.Close() }()
	h.mu.Lock()
	h.procs[i] = p
	h.mu.Unlock()
}

// instances returns the running correct processes with their metrics URLs.
func (h *harness) instances() ([]*proc, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*proc(nil), h.procs...), append([]string(nil), h.metrics...)
}

// waitReady waits until instance i's /readyz answers 200.
func (h *harness) waitReady(i int, limit time.Duration) time.Duration {
	procs, urls := h.instances()
	cl := http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	for {
		resp, err := cl.Get(urls[i] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case <-procs[i].Done:
			h.t.Fatalf("correct-%d exited: %v (log %s)", i, procs[i].Cmd.ProcessState, procs[i].log.Name())
		default:
		}
		if time.Since(start) > limit {
			h.t.Fatalf("correct-%d not ready after %v: %v", i, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// faults applies the shape's faults in order as the runs end, while the producer goes on. A
// rolling broker restart takes about a minute; it runs beside the faults after it (a Redis
// failover or a rebalance in the middle of it is what a bad day looks like), so that in the
// short soak every fault still meets live runs.
func (h *harness) faults(w *fleet) {
	var rolls sync.WaitGroup
	var rollErr error
	for _, f := range h.sh.faults {
		for w.endedNow() < int(f.at*float64(h.sh.runs)) {
			w.checkAlive()
			time.Sleep(200 * time.Millisecond)
		}
		ev := faultEvent{name: f.name, start: time.Now(), endedAt: w.endedNow()}
		fr := w.inFlight()
		h.faultRuns = append(h.faultRuns, fr[:min(len(fr), 3)]...)
		switch f.name {
		case faultBrokers:
			rolls.Wait() // one roll at a time
			rolls.Add(1)
			go func() {
				defer rolls.Done()
				if err := h.rollBrokers(); err != nil {
					rollErr = err
				}
				h.logFault(ev, w)
			}()
			continue
		case faultRedis:
			h.redis.Run("failover")
		case faultCorrect:
			for i := range 3 {
				procs, _ := h.instances()
				procs[i].terminate(h.t, 60*time.Second)
				h.startCorrect(i)
				h.waitReady(i, 2*time.Minute)
			}
		case faultRebalance:
			procs, _ := h.instances()
			procs[2].terminate(h.t, 60*time.Second)
			time.Sleep(2 * h.sh.sample)
			h.waitReady(0, 2*time.Minute)
			h.waitReady(1, 2*time.Minute)
			h.startCorrect(2)
			h.waitReady(2, 2*time.Minute)
		}
		h.logFault(ev, w)
	}
	rolls.Wait()
	if rollErr != nil {
		h.t.Fatalf("rolling broker restart: %v", rollErr)
	}
}

func (h *harness) logFault(ev faultEvent, w *fleet) {
	ev.end, ev.endedDone = time.Now(), w.endedNow()
	h.mu.Lock()
	h.faultLog = append(h.faultLog, ev)
	h.mu.Unlock()
	h.t.Logf("fault %s: %v, runs ended %d → %d", ev.name, ev.end.Sub(ev.start).Round(100*time.Millisecond), ev.endedAt, ev.endedDone)
}

// rollBrokers restarts the brokers one by one (SIGTERM, a controlled shutdown), each once the
// partitions are fully in sync again.
func (h *harness) rollBrokers() error {
	for n := 1; n <= 3; n++ {
		for _, action := range []string{"stop-node", "start-node"} {
			if _, err := h.kafka.Try(action, strconv.Itoa(n)); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := h.kafka.WaitFullISR(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("after restarting broker %d: %w", n, err)
		}
	}
	return nil
}

// dumpMetrics keeps each instance's /metrics page at the end, to tell which series a growing
// count comes from.
func (h *harness) dumpMetrics() {
	procs, urls := h.instances()
	for i, u := range urls {
		if procs[i] == nil {
			continue
		}
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = os.WriteFile(filepath.Join(h.out, "logs", fmt.Sprintf("metrics-correct-%d.txt", i)), b, 0o644)
	}
}

// proc is one correct process.
type proc struct {
	*testenv.Proc
	log     *os.File
	stopped bool // by the test: its exit is no failure
}

func (p *proc) terminate(t *testing.T, limit time.Duration) {
	p.stopped = true
	p.Terminate(t, limit)
}
