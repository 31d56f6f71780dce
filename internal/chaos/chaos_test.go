//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

const runID = "chaos-run"

// size is the workload of one scenario.
type size struct {
	steps, groups, rollouts int
	outage                  time.Duration // how long the broker stays down
}

// workload is the size of each scenario: WMRL_CHAOS=full or short; WMRL_CHAOS_OUTAGE (a Go
// duration) overrides how long the broker stays down, e.g. 5m for the longest outage to ride out.
func workload(t *testing.T) (string, size) {
	mode, sz := "short", size{steps: 48, groups: 8, rollouts: 8, outage: 15 * time.Second}
	if os.Getenv("WMRL_CHAOS") == "full" {
		// ≥ 100k rollouts per scenario.
		mode, sz = "full", size{steps: 1600, groups: 8, rollouts: 8, outage: 60 * time.Second}
	}
	if v := os.Getenv("WMRL_CHAOS_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WMRL_CHAOS_OUTAGE=%q: %v", v, err)
		}
		sz.outage = d
	}
	return mode, sz
}

// scenario is one fault pattern, applied while the stages work through the backlog.
type scenario struct {
	name  string
	fault func(h *harness, r *runCtx)
	// outage is excluded from the stall measurement (the broker or Redis is down on purpose).
	outage bool
}

var scenarios = []scenario{
	{name: "kill-worldmodel", fault: func(h *harness, r *runCtx) { r.killRestart("worldmodel", 2) }},
	{name: "kill-sandbox", fault: func(h *harness, r *runCtx) { r.killRestart("sandbox", 2) }},
	{name: "kill-correct", fault: func(h *harness, r *runCtx) { r.killRestart("correct", 2) }},
	{name: "broker-kill-in-txn", outage: true, fault: func(h *harness, r *runCtx) {
		h.killBroker()
		r.waitReady("a", false, 20*time.Second)
		time.Sleep(h.size.outage)
		h.startBroker()
		// correct rides the outage out in place: ready again without a restart.
		r.waitReady("a", true, 2*time.Minute)
	}},
	{name: "redis-flushall", fault: func(h *harness, r *runCtx) {
		if err := h.redis.FlushAll(context.Background()).Err(); err != nil {
			h.t.Errorf("FLUSHALL: %v", err)
		}
	}},
	{name: "redis-kill", outage: true, fault: func(h *harness, r *runCtx) {
		h.killRedis()
		time.Sleep(5 * time.Second)
		h.startRedis()
	}},
	{name: "zombie", fault: func(h *harness, r *runCtx) {
		// The paused instance is replaced by one with the same transactional id; resumed, the
		// zombie must be fenced and write nothing.
		z := r.procs["correct"]
		z.mayExit = true
		_ = z.Cmd.Process.Signal(syscall.SIGSTOP)
		r.start("correct-2", r.correctArgs("a")...)
		r.waitMore(64, 2*time.Minute)
		_ = z.Cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-z.Done:
		case <-time.After(90 * time.Second):
			h.t.Errorf("zombie correct still running 90s after SIGCONT")
		}
	}},
	{name: "scale-correct", fault: func(h *harness, r *runCtx) {
		r.start("correct-b", r.correctArgs("b")...)
		r.waitMore(64, 2*time.Minute)
		r.start("correct-c", r.correctArgs("c")...)
		r.waitMore(64, 2*time.Minute)
		r.procs["correct-b"].terminate(h.t, 60*time.Second)
	}},
}

func TestChaos(t *testing.T) {
	mode, sz := workload(t)
	h := newHarness(t, sz)
	only := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("WMRL_CHAOS_ONLY"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			only[s] = true
		}
	}
	base := h.run(t, scenario{name: "baseline"})
	t.Logf("chaos %s: %d rollouts per scenario, baseline digest %s", mode, h.expected(), base.digest)
	type row struct {
		name string
		res  result
	}
	results := []row{{"baseline", base}}
	for _, sc := range scenarios {
		if len(only) > 0 && !only[sc.name] {
			continue
		}
		results = append(results, row{sc.name, h.run(t, sc)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-20s %6s %6s %9s %8s %-8s %s\n", "scenario", "lost", "dup", "snap-lost", "snap-dup", "digest", "longest stall")
	for _, r := range results {
		d := "equal"
		if r.res.digest != base.digest {
			d = "DIFFERS"
		}
		fmt.Fprintf(&b, "%-20s %6d %6d %9d %8d %-8s %v\n", r.name, r.res.lost, r.res.dup, r.res.calLost, r.res.calDup, d,
			r.res.stall.Round(100*time.Millisecond))
		if r.res.lost != 0 || r.res.dup != 0 || r.res.calLost != 0 || r.res.calDup != 0 || d != "equal" {
			t.Errorf("%s: lost=%d dup=%d snapshots lost=%d dup=%d digest=%s", r.name, r.res.lost, r.res.dup, r.res.calLost, r.res.calDup, d)
		}
	}
	t.Log(b.String())
}

// harness owns the broker, Redis, the world-model server and the wmrl binary.
type harness struct {
	t                 *testing.T
	size              size
	dir, bin          string
	local             *testenv.Local // the broker's and Redis's scripts
	brokers, redisURL string
	redis             *redis.Client
	wm                *httptest.Server
	argv              string
	// inputs are the workload's two halves (steps [0, steps/2) and the rest): the second is
	// published just before the fault, so that a fault always meets work still to do (a backlog
	// can otherwise be sealed in one transaction before the fault begins).
	inputs [2]string
}

func newHarness(t *testing.T, sz size) *harness {
	dir := t.TempDir()
	kafkaPort, ctrlPort, rdPort := testenv.FreePortRun(t, 1, 0), testenv.FreePortRun(t, 1, 0), testenv.FreePortRun(t, 1, 0)
	h := &harness{t: t, size: sz, dir: dir, local: testenv.NewLocal(t, "WMRL_KAFKA_PORT="+strconv.Itoa(kafkaPort),
		"WMRL_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ctrlPort), "WMRL_REDIS_PORT="+strconv.Itoa(rdPort))}
	h.brokers = fmt.Sprintf("127.0.0.1:%d", kafkaPort)
	h.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", rdPort)
	h.bin = testenv.BuildWMRL(t, dir)
	h.startBroker()
	t.Cleanup(func() { h.local.Run("kafka.sh", "stop") })
	h.startRedis()
	t.Cleanup(func() { h.local.Run("redis.sh", "stop") })
	h.redis = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rdPort)})
	t.Cleanup(func() { h.redis.Close() })
	h.wm = httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(h.wm.Close)
	// The sandbox's jail runs jobs as an unprivileged uid, which cannot search t.TempDir (0700):
	// the task script gets a directory of its own that every user can read.
	taskDir, err := os.MkdirTemp("", "wmrl-chaos-task-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(taskDir) })
	if err := os.Chmod(taskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(taskDir, "score.sh")
	if err := os.WriteFile(script, []byte(scoreScript), 0o755); err != nil {
		t.Fatal(err)
	}
	argv, _ := json.Marshal([]string{"/bin/sh", script, "{artifact}"})
	h.argv = string(argv)
	h.inputs = [2]string{filepath.Join(dir, "rollouts-1.jsonl"), filepath.Join(dir, "rollouts-2.jsonl")}
	h.writeInput()
	return h
}

func (h *harness) expected() int { return h.size.steps * h.size.groups * h.size.rollouts }

func (h *harness) startBroker() { h.local.Run("kafka.sh", "start") }
func (h *harness) startRedis()  { h.local.Run("redis.sh", "start") }

func (h *harness) killPidfile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatalf("pid file: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) killBroker() { h.killPidfile(filepath.Join(h.local.Dir, "kafka", "kafka.pid")) }

func (h *harness) killRedis() { h.killPidfile(filepath.Join(h.local.Dir, "redis", "redis.pid")) }

// writeInput writes the JSONL workload: scores are functions of the rollout's index, so every
// scenario sees the same rewards and the digest can be compared.
func (h *harness) writeInput() {
	var bufs [2]bytes.Buffer
	k := 0
	for s := 0; s < h.size.steps; s++ {
		enc := json.NewEncoder(&bufs[min(1, s/(h.size.steps/2))])
		for j := 0; j < h.size.groups; j++ {
			for i := 0; i < h.size.rollouts; i++ {
				art := fmt.Sprintf(`{"k":%d,"wm":%.2f,"exec":%.2f}`, k, float64((k*7)%19)/20, float64((k*11+3)%17)/20)
				_ = enc.Encode(map[string]any{"step": s, "group_id": "g" + strconv.Itoa(j), "prompt": "task", "artifact": art})
				k++
			}
		}
	}
	for i, f := range h.inputs {
		if err := os.WriteFile(f, bufs[i].Bytes(), 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
}

// result is what the checker found for one scenario.
type result struct {
	lost, dup int
	// calLost, calDup count calibration snapshots: one per sealed step is expected.
	calLost, calDup int
	digest          string
	stall           time.Duration
}

// runCtx is one scenario's pipeline: its topic prefix, groups and processes.
type runCtx struct {
	h      *harness
	name   string
	prefix string
	procs  map[string]*proc
	// readyz is each correct instance's /readyz URL, by instance id.
	readyz map[string]string
	mu     sync.Mutex
	rows   atomic.Int64
	// arrivals are the times rows arrived, for the stall measurement.
	arrivals []time.Time
}

func (h *harness) run(t *testing.T, sc scenario) result {
	start := time.Now()
	r := &runCtx{h: h, name: sc.name, prefix: "chaos." + sc.name + ".", procs: map[string]*proc{}, readyz: map[string]string{}}
	r.wmrl(2*time.Minute, "topics", "create", "--partitions", "3")
	r.generate(0)
	r.start("worldmodel", r.worldmodelArgs()...)
	r.start("sandbox", r.sandboxArgs()...)
	r.start("correct", r.correctArgs("a")...)
	stopFollow := r.follow()
	want := h.expected()
	r.waitRows(want/4, 5*time.Minute)
	// The stall is measured from here: before, the second half was not published yet.
	more := time.Now()
	r.generate(1)
	var faultEnd time.Time
	if sc.fault != nil {
		if got := r.rowsNow(); got >= want {
			t.Fatalf("%s: all %d rows arrived before the fault; it would test nothing", sc.name, got)
		}
		sc.fault(h, r)
		faultEnd = time.Now()
	}
	r.waitRows(want, 15*time.Minute)
	// A little longer, so a late duplicate would be seen.
	time.Sleep(2 * time.Second)
	stopFollow()
	counts := r.count()
	res := result{}
	for k := 0; k < want; k++ {
		switch c := counts[k]; {
		case c == 0:
			res.lost++
		case c > 1:
			res.dup += c - 1
		}
	}
	heads := r.countHeads()
	for v := int64(0); v < int64(r.h.size.steps); v++ {
		switch c := heads[v]; {
		case c == 0:
			res.calLost++
		case c > 1:
			res.calDup += c - 1
		}
	}
	res.digest = strings.TrimSpace(r.wmrl(2*time.Minute, "digest", "--run", runID))
	res.stall = r.longestStall(more, faultEnd, sc.outage)
	for _, p := range r.procs {
		p.terminate(t, 60*time.Second)
	}
	t.Logf("%s: %d rows and %d calibration snapshots checked in %v, lost=%d dup=%d, snapshots lost=%d dup=%d, stall %v",
		sc.name, want, r.h.size.steps, time.Since(start).Round(time.Second), res.lost, res.dup, res.calLost, res.calDup, res.stall.Round(100*time.Millisecond))
	return res
}

// generate publishes half i of the workload.
func (r *runCtx) generate(i int) {
	// Two generate calls publish one run in halves: neither ends it (no end-of-run record), so
	// every scenario compares the same input with the baseline.
	r.wmrl(5*time.Minute, "generate", "--backend", "jsonl", "--input", r.h.inputs[i], "--run", runID, "--anchor-fraction", "0.25",
		"--end-run=false")
}

func (r *runCtx) global() []string {
	return []string{"--brokers", r.h.brokers, "--redis", r.h.redisURL, "--topic-prefix", r.prefix, "--log-format", "json"}
}

func (r *runCtx) worldmodelArgs() []string {
	return []string{"worldmodel", "--backend", "openai", "--base-url", r.h.wm.URL + "/v1", "--model", "m",
		"--concurrency", "16", "--metrics-addr", "", "--group", r.prefix + "worldmodel",
		"--instance-id", r.prefix + "worldmodel", "--session-timeout", "10s"}
}

func (r *runCtx) sandboxArgs() []string {
	return []string{"sandbox", "--single-step-no-private", "--argv", r.h.argv, "--slots", "4", "--timeout", "30s", "--metrics-addr", "",
		"--group", r.prefix + "sandbox", "--instance-id", r.prefix + "sandbox", "--session-timeout", "10s"}
}

// correctArgs are one correct instance's flags; instances with the same id share a
// transactional id (a replacement), different ids are separate members.
func (r *runCtx) correctArgs(id string) []string {
	addr := testenv.FreeAddr(r.h.t)
	r.readyz[id] = "http://" + addr + "/readyz"
	return []string{"correct", "--metrics-addr", addr, "--group", r.prefix + "correct",
		"--transactional-id", r.prefix + "correct-" + id, "--instance-id", r.prefix + "correct-" + id,
		"--session-timeout", "10s", "--redis-prefix", strings.TrimSuffix(r.prefix, "."), "--min-pairs", "32", "--window", "256"}
}

func (r *runCtx) wmrl(timeout time.Duration, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.h.bin, append(r.global(), args...)...)
	cmd.Env = testenv.StageEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.h.t.Fatalf("%s: wmrl %v: %v\n%s", r.name, args, err, stderr.String())
	}
	return string(out)
}

// killRestart SIGKILLs a stage n times, each time once more rows arrived, and restarts it at once
// (as a supervisor would), with the same instance id.
func (r *runCtx) killRestart(name string, n int) {
	for i := 0; i < n; i++ {
		p := r.procs[name]
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		<-p.Done
		r.start(name, p.args...)
		r.waitMore(r.h.expected()/8, 5*time.Minute)
	}
}

// waitReady waits until correct instance id's /readyz answers 200 (want) or anything else.
func (r *runCtx) waitReady(id string, want bool, limit time.Duration) {
	cl := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := cl.Get(r.readyz[id])
		ok := err == nil && resp.StatusCode == http.StatusOK
		if resp != nil {
			resp.Body.Close()
		}
		if ok == want {
			r.h.t.Logf("%s: correct-%s /readyz ready=%v after %v", r.name, id, want, limit-time.Until(deadline))
			return
		}
		if time.Now().After(deadline) {
			r.h.t.Errorf("%s: correct-%s /readyz did not become ready=%v within %v (last: %v)", r.name, id, want, limit, err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *runCtx) rowsNow() int { return int(r.rows.Load()) }

// waitMore waits for n more rows, or for the rest when fewer remain (a batch may have sealed the
// whole backlog meanwhile).
func (r *runCtx) waitMore(n int, limit time.Duration) {
	r.waitRows(min(r.rowsNow()+n, r.h.expected()), limit)
}

func (r *runCtx) waitRows(n int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for r.rowsNow() < n {
		for name, p := range r.procs {
			select {
			case <-p.Done:
				if !p.mayExit {
					r.h.t.Fatalf("%s: stage %s exited by itself (%v); a stage must ride out faults without a restart\n%s",
						r.name, name, p.Cmd.ProcessState, p.tail(25))
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			r.h.t.Fatalf("%s: %d of %d rows after %v\n%s", r.name, r.rowsNow(), n, limit, r.diagnose())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// diagnose describes a stuck pipeline, most telling last (CI keeps only the end of the output):
// each stage's notable log lines (progress lines are repetitive, only the last is kept), then the
// correct group's members with their assignments and its committed input offsets against the
// end offsets.
func (r *runCtx) diagnose() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[name]
		state := "running"
		select {
		case <-p.Done:
			state = fmt.Sprint(p.Cmd.ProcessState)
		default:
		}
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", name, state, p.notable(8))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.h.brokers))
	if err != nil {
		return b.String() + "group: " + err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	group := r.prefix + "correct"
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		fmt.Fprintf(&b, "--- group %s: describe: %v\n", group, err)
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "--- group %s: state %s, protocol %s, err %v\n", g.Group, g.State, g.Protocol, g.Err)
		for _, m := range g.Members {
			inst := ""
			if m.InstanceID != nil {
				inst = *m.InstanceID
			}
			var parts []string
			if ca, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range ca.Topics {
					parts = append(parts, fmt.Sprintf("%s%v", strings.TrimPrefix(t.Topic, r.prefix), t.Partitions))
				}
			}
			fmt.Fprintf(&b, "    member %s instance %s host %s: %s\n", m.MemberID, inst, m.ClientHost, strings.Join(parts, " "))
		}
	}
	lag, err := adm.Lag(ctx, group)
	if err != nil {
		fmt.Fprintf(&b, "--- lag: %v\n", err)
		return b.String()
	}
	for _, gl := range lag {
		for _, l := range gl.Lag.Sorted() {
			fmt.Fprintf(&b, "    %s/%d committed %d end %d lag %d err %v\n", strings.TrimPrefix(l.Topic, r.prefix), l.Partition,
				l.Commit.At, l.End.Offset, l.Lag, l.Err)
		}
	}
	return b.String()
}

// follow reads the advantages topic read_committed in the background, counting rows and noting
// when they arrive.
func (r *runCtx) follow() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.h.brokers), kgo.ConsumeTopics(topics.NewNames(r.prefix).Advantages()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return
		}
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) {
				rows, err := topics.DecodeAdvantageRecord(rec)
				if err != nil {
					return
				}
				r.rows.Add(int64(len(rows)))
				r.mu.Lock()
				r.arrivals = append(r.arrivals, time.Now())
				r.mu.Unlock()
			})
		}
	}()
	return func() { cancel(); <-done }
}

// count reads the whole advantages topic once more and counts every row by rollout index,
// without de-duplicating.
func (r *runCtx) count() map[int]int {
	counts := map[int]int{}
	total := 0
	r.readAll(topics.NewNames(r.prefix).Advantages(), func(rec *kgo.Record) {
		rows, err := topics.DecodeAdvantageRecord(rec)
		if err != nil {
			r.h.t.Errorf("%s: undecodable advantages record %d: %v", r.name, rec.Offset, err)
			return
		}
		for _, row := range rows {
			k, ok := r.index(row)
			if !ok {
				r.h.t.Errorf("%s: unexpected row %s/%d/%s", r.name, row.RunID, row.Step, row.RolloutID)
				continue
			}
			counts[k]++
			total++
		}
	})
	if total < r.h.expected() {
		r.h.t.Logf("%s: counted %d rows of %d", r.name, total, r.h.expected())
	}
	return counts
}

// countHeads counts the committed calibration snapshots (heads, not window chunks) per step of
// the run's one stream: every sealed step must have exactly one, whatever the faults.
func (r *runCtx) countHeads() map[int64]int {
	heads := map[int64]int{}
	r.readAll(topics.NewNames(r.prefix).Calibration(), func(rec *kgo.Record) {
		if topics.IsCalibrationChunk(rec) {
			return
		}
		sn, err := topics.DecodeCalibrationRecord(rec)
		if err != nil {
			r.h.t.Errorf("%s: undecodable calibration record %d: %v", r.name, rec.Offset, err)
			return
		}
		if sn.RunID != runID {
			r.h.t.Errorf("%s: calibration snapshot of unexpected run %s", r.name, sn.RunID)
			return
		}
		heads[sn.Step]++
	})
	return heads
}

// readAll reads topic read_committed from its start until it has been idle for 5 s.
func (r *runCtx) readAll(topic string, fn func(*kgo.Record)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.h.brokers), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		r.h.t.Fatal(err)
	}
	defer cl.Close()
	idle := time.Now()
	for time.Since(idle) < 5*time.Second && ctx.Err() == nil {
		pctx, pc := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pc()
		fs.EachRecord(func(rec *kgo.Record) {
			idle = time.Now()
			fn(rec)
		})
	}
}

// index maps a row to its rollout index k (the generator names rollouts "<step>-g<j>-<i>").
func (r *runCtx) index(row topics.AdvantageRow) (int, bool) {
	parts := strings.Split(row.RolloutID, "-")
	if row.RunID != runID || len(parts) < 3 {
		return 0, false
	}
	j, err1 := strconv.Atoi(strings.TrimPrefix(parts[len(parts)-2], "g"))
	i, err2 := strconv.Atoi(parts[len(parts)-1])
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (int(row.Step)*r.h.size.groups+j)*r.h.size.rollouts + i, true
}

// longestStall is the longest time without a row arriving while input was waiting: from when the
// second half was published (from) to the end of the run. A deliberate outage's own duration (up
// to to) is not counted.
func (r *runCtx) longestStall(from, to time.Time, outage bool) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(r.arrivals); i++ {
		a, b := maxTime(r.arrivals[i-1], from), r.arrivals[i]
		if b.Before(from) {
			continue
		}
		if outage {
			a = maxTime(a, to) // the gap after the service is back
		}
		longest = max(longest, b.Sub(a))
	}
	return longest
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// proc is one stage process.
type proc struct {
	*testenv.Proc
	args []string
	out  *testenv.SyncBuffer
	// mayExit marks a process the scenario stops or expects to stop (a fenced zombie).
	mayExit bool
}

func (r *runCtx) start(name string, args ...string) {
	cmd := exec.Command(r.h.bin, append(r.global(), args...)...)
	cmd.Env = testenv.StageEnv()
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	r.procs[name] = &proc{Proc: testenv.StartProc(r.h.t, name, cmd), args: args, out: out}
}

func (p *proc) terminate(t *testing.T, limit time.Duration) {
	p.mayExit = true
	p.Terminate(t, limit)
}

// notable is the last n log lines that are not periodic progress lines, then the last progress
// line.
func (p *proc) notable(n int) string {
	var keep []string
	last := ""
	for _, l := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		if strings.Contains(l, `"msg":"progress"`) {
			last = l
			continue
		}
		keep = append(keep, l)
	}
	keep = keep[max(0, len(keep)-n):]
	if last != "" {
		keep = append(keep, last)
	}
	return strings.Join(keep, "\n")
}

func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// scoreScript is the sandbox program: the artifact's "exec" value is the score.
const scoreScript = `#!/bin/sh
set -eu
score=$(sed -n 's/.*"exec": *\([0-9][0-9.]*\).*/\1/p' "$1")
printf '{"score": %s}\n' "$score"
`
