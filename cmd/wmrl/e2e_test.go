package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/topics"
)

// The e2e workload: small enough for a shared 2-core machine under -race, large enough that
// anchor and world-model groups, an invalid prediction and a sandbox timeout all occur.
const (
	e2eSteps    = 4
	e2eGroups   = 3
	e2eRollouts = 4
	e2eAnchor   = 0.5
	e2eRun      = "e2e-run-1"
)

// e2eRollout is what the test knows about one rollout it generated.
type e2eRollout struct {
	id, group  string
	step       int64
	anchor     bool
	wm, exec   string // scores as written into the artifact ("0.35")
	invalidWM  bool   // the world model replies with an out-of-range score
	sandboxTTL bool   // the sandbox job sleeps past --timeout
}

// TestE2E runs the CLI as a user does — one binary, one process per stage, real Kafka and
// Redis — from `topics create` to `train`, `replay` and `digest`, and checks the
// exactly-one-record-per-rollout contract, failure statuses, masking, graceful SIGTERM and that
// a replay reproduces the live digest.
//
// It runs twice: in the default JSON, and in Protobuf Confluent-framed against the real schema
// registry of WMRL_TEST_REGISTRY (that run alone skips without one unless services are
// required); both give the same live digest.
func TestE2E(t *testing.T) {
	digests := map[string]string{}
	t.Run("json", func(t *testing.T) { digests["json"] = e2eInMode(t, "") })
	t.Run("registry", func(t *testing.T) { digests["registry"] = e2eInMode(t, testenv.Registry(t)) })
	if j, r := digests["json"], digests["registry"]; j != "" && r != "" && j != r {
		t.Fatalf("live digests differ: json %s, registry %s", j, r)
	}
}

// e2eInMode is TestE2E's run, with --schema-registry registry when not empty; it returns the
// live digest line.
func e2eInMode(t *testing.T, registry string) string {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	groups := map[string]string{
		"worldmodel": unique + "-worldmodel", "sandbox": unique + "-sandbox",
		"correct": unique + "-correct", "train": unique + "-train",
	}
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, groups) })

	dir := t.TempDir()
	bin := buildWMRL(t, dir)
	h := &e2eHarness{t: t, bin: bin, global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix,
	}}
	if registry != "" {
		h.global = append(h.global, "--schema-registry", registry)
	}
	t.Cleanup(h.stopAll)

	// 1. Topics.
	h.run(time.Minute, 0, "topics", "create", "--partitions", "2")
	h.run(time.Minute, 0, "topics", "check", "--partitions", "2")

	// 2. Generate from JSONL.
	rollouts := e2eWorkload(t)
	input := filepath.Join(dir, "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)
	out := h.run(2*time.Minute, 0, "generate", "--backend", "jsonl", "--input", input,
		"--run", e2eRun, "--anchor-fraction", strconv.FormatFloat(e2eAnchor, 'g', -1, 64))
	anchorGroups := 0
	for _, r := range rollouts {
		if r.anchor && strings.HasSuffix(r.id, "-0") {
			anchorGroups++
		}
	}
	wantGen := fmt.Sprintf("published %d steps, %d groups (%d anchor), %d rollouts (0 by reference)",
		e2eSteps, e2eSteps*e2eGroups, anchorGroups, len(rollouts))
	if !strings.Contains(out, wantGen) {
		t.Fatalf("generate printed %q, want %q", out, wantGen)
	}

	// 3-5. The long-running stages.
	var wmRequests atomic.Int64
	wm := httptest.NewServer(testenv.WorldModel(&wmRequests))
	t.Cleanup(wm.Close)
	argv := e2eScoreArgv(t)
	wmProc := h.start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", wm.URL+"/v1",
		"--model", "m", "--concurrency", "4", "--metrics-addr", "127.0.0.1:0", "--group", groups["worldmodel"])
	sbProc := h.start("sandbox", "sandbox", "--single-step-no-private", "--argv", argv, "--slots", "2", "--timeout", "10s",
		"--metrics-addr", "127.0.0.1:0", "--group", groups["sandbox"])
	corrProc := h.start("correct", "correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique+"-txn",
		"--group", groups["correct"], "--redis-prefix", unique)

	// 6. Wait for the digest to see every step, then train.
	live := h.pollDigest(90 * time.Second)
	t.Logf("%s (%d of %d groups are anchors)", live, anchorGroups, e2eSteps*e2eGroups)
	trainOut := h.run(time.Minute, 0, "train", "--run", e2eRun, "--max-steps", strconv.Itoa(e2eSteps), "--group", groups["train"])
	checkTrainOutput(t, trainOut, e2eRollouts*e2eGroups)
	for _, p := range []*e2eProc{wmProc, sbProc} {
		checkMetrics(t, p, true)
	}
	checkMetrics(t, corrProc, false)

	// 7. Graceful shutdown.
	for _, p := range []*e2eProc{wmProc, sbProc, corrProc} {
		p.terminate(30 * time.Second)
	}
	if n := wmRequests.Load(); n < int64(len(rollouts)) {
		t.Errorf("world model served %d requests for %d rollouts", n, len(rollouts))
	}

	// 8. Contents of the topics.
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pred, exec := readCommittedRecords(ctx, t, opts, names.Predicted()), readCommittedRecords(ctx, t, opts, names.Executed())
	wantCT := topics.ContentTypeJSON
	if registry != "" {
		wantCT = topics.ContentTypeProtobufConfluent
	}
	for _, r := range append(slices.Clone(pred), exec...) {
		if ct, _ := topics.HeaderValue(r.Headers, topics.HeaderContentType); ct != wantCT {
			t.Fatalf("%s: content-type %q, want %q", r.Topic, ct, wantCT)
		}
	}
	checkPredicted(t, pred, rollouts)
	checkExecuted(t, exec, rollouts)
	// correct's own topics: framed with a registry, bare Arrow and binary layouts without.
	for topic, want := range map[string]string{names.Advantages(): topics.ContentTypeArrow, names.Calibration(): topics.ContentTypeBinary} {
		if registry != "" {
			want = topics.ContentTypeProtobufConfluent
		}
		recs := readCommittedRecords(ctx, t, opts, topic)
		if len(recs) == 0 {
			t.Fatalf("%s: no records", topic)
		}
		for _, r := range recs {
			if ct, _ := topics.HeaderValue(r.Headers, topics.HeaderContentType); r.Value != nil && ct != want {
				t.Fatalf("%s: content-type %q, want %q", r.Topic, ct, want)
			}
		}
	}
	rows := checkAdvantageTopic(ctx, t, opts, names.Advantages(), rollouts, live, e2eSteps)
	// `runs list` over a Redis prefix that holds nothing lists the run from the changelog alone,
	// its snapshots decoded by content-type (framed Protobuf with a registry).
	var listed []runJSON
	if err := json.Unmarshal([]byte(h.run(time.Minute, 0, "runs", "list", "--redis-prefix", unique+"-none", "--output", "json")), &listed); err != nil {
		t.Fatalf("runs list --output json: %v", err)
	}
	if len(listed) != 1 || listed[0].Run != e2eRun || listed[0].Source != "changelog" {
		t.Fatalf("runs list from the changelog: %+v, want %s from the changelog", listed, e2eRun)
	}

	// 9. Replay reproduces the live digest.
	replayFile := filepath.Join(dir, "replay.bin")
	rout := h.run(2*time.Minute, 0, "replay", "--run", e2eRun, "--out", replayFile,
		"--redis-prefix", unique+"-replay", "--state-prefix", unique)
	if !strings.Contains(rout, "digest="+topics.DigestRows(rows)) || !strings.Contains(rout, "incomplete_steps=0") {
		t.Errorf("replay printed %q, want digest=%s and no incomplete steps", rout, topics.DigestRows(rows))
	}
	if fromFile := strings.TrimSpace(h.run(time.Minute, 0, "digest", "--run", e2eRun, "--file", replayFile)); fromFile != live {
		t.Errorf("digest of the replay file %q, of the live topic %q", fromFile, live)
	}
	return live
}

// e2eWorkload lays out the rollouts and picks the two failure cases: the second rollout of the
// first anchor group sleeps past the sandbox timeout, the third rollout of the first world-model
// group gets an out-of-range prediction. Scores are fixed functions of the rollout's index.
func e2eWorkload(t *testing.T) []e2eRollout {
	t.Helper()
	var out []e2eRollout
	timeoutSet, invalidSet := false, false
	k := 0
	for s := int64(0); s < e2eSteps; s++ {
		for j := 0; j < e2eGroups; j++ {
			gid := fmt.Sprintf("%d-g%d", s, j)
			anchor := topics.IsAnchor(e2eRun, gid, e2eAnchor)
			for i := 0; i < e2eRollouts; i++ {
				r := e2eRollout{
					id: fmt.Sprintf("%s-%d", gid, i), group: gid, step: s, anchor: anchor,
					wm:   fmt.Sprintf("%.2f", float64((k*7)%19)/20),
					exec: fmt.Sprintf("%.2f", float64((k*11+3)%17)/20),
				}
				if anchor && !timeoutSet && i == 1 {
					r.sandboxTTL, timeoutSet = true, true
				}
				if !anchor && !invalidSet && i == 2 {
					r.invalidWM, invalidSet = true, true
					r.wm = "1.50"
				}
				out = append(out, r)
				k++
			}
		}
	}
	if !timeoutSet || !invalidSet {
		t.Fatalf("run %s with anchor fraction %v needs both anchor and world-model groups (timeout case %v, invalid case %v)",
			e2eRun, e2eAnchor, timeoutSet, invalidSet)
	}
	return out
}

func writeE2EInput(t *testing.T, path string, rollouts []e2eRollout) {
	t.Helper()
	var buf bytes.Buffer
	for _, r := range rollouts {
		buf.Write(e2eLine(t, r))
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// e2eLine is the `generate --backend jsonl` input line of one rollout.
func e2eLine(t *testing.T, r e2eRollout) []byte {
	t.Helper()
	art := fmt.Sprintf(`{"rollout":%q,"wm":%s,"exec":%s}`, r.id, r.wm, r.exec)
	if r.sandboxTTL {
		art = fmt.Sprintf(`{"rollout":%q,"wm":%s,"exec":%s,"sleep":60}`, r.id, r.wm, r.exec)
	}
	_, g, _ := strings.Cut(r.group, "-")
	line, err := json.Marshal(map[string]any{
		"step": r.step, "group_id": g, "prompt": "task " + r.group, "artifact": art,
		"policy_version": fmt.Sprintf("ckpt-%d", r.step),
	})
	if err != nil {
		t.Fatal(err)
	}
	return append(line, '\n')
}

// buildWMRL builds the binary once, with the race detector when the test binary has it, so the
// stages run with the same checks as the in-process tests.
func buildWMRL(t *testing.T, dir string) string {
	t.Helper()
	var flags []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				// A -race binary sleeps 1 s at exit (ThreadSanitizer's atexit_sleep_ms), which
				// shows in the logged SIGTERM-to-exit times.
				flags = append(flags, "-race")
			}
		}
	}
	return testenv.BuildWMRL(t, dir, flags...)
}

type e2eHarness struct {
	t      *testing.T
	bin    string
	global []string
	// env is added to every command's environment (secrets the test passes as WMRL_* variables).
	env   []string
	procs []*e2eProc
}

type e2eProc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stderr *testenv.SyncBuffer
	done   chan struct{}
	err    error
}

func (h *e2eHarness) command(ctx context.Context, args ...string) *exec.Cmd {
	// Global flags are persistent: cobra takes them after the (sub)command's name.
	cmd := exec.CommandContext(ctx, h.bin, append(append([]string(nil), args...), h.global...)...)
	cmd.Env = append(testenv.StageEnv(), h.env...)
	return cmd
}

// run executes a one-shot command and returns its stdout; an exit status other than want
// fails the test with the command's stderr.
func (h *e2eHarness) run(timeout time.Duration, want int, args ...string) string {
	h.t.Helper()
	out, errOut, code := h.try(timeout, args...)
	if code != want {
		h.t.Fatalf("wmrl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

func (h *e2eHarness) try(timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := h.command(ctx, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		h.t.Fatalf("wmrl %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		h.t.Fatalf("wmrl %s: no exit within %v\nstderr:\n%s", strings.Join(args, " "), timeout, e.String())
	}
	return o.String(), e.String(), code
}

// start launches a long-running stage; its stderr goes to the test log if the test fails.
func (h *e2eHarness) start(name string, args ...string) *e2eProc {
	h.t.Helper()
	cmd := h.command(context.Background(), args...)
	p := &e2eProc{t: h.t, name: name, cmd: cmd, stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start wmrl %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	h.procs = append(h.procs, p)
	return p
}

// stopAll kills what is still running and logs every stage's output when the test failed.
func (h *e2eHarness) stopAll() {
	for _, p := range h.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if h.t.Failed() {
			h.t.Logf("---- wmrl %s output ----\n%s", p.name, p.stderr.String())
		}
	}
}

// terminate sends SIGTERM and requires a clean exit within limit.
func (p *e2eProc) terminate(limit time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
		p.t.Fatalf("wmrl %s exited before SIGTERM: %v", p.name, p.err)
	default:
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM wmrl %s: %v", p.name, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			p.t.Errorf("wmrl %s after SIGTERM: %v", p.name, p.err)
		}
		p.t.Logf("wmrl %s stopped %v after SIGTERM", p.name, time.Since(start).Round(time.Millisecond))
	case <-time.After(limit):
		p.t.Errorf("wmrl %s still running %v after SIGTERM", p.name, limit)
	}
}

var metricsAddrRE = regexp.MustCompile(`msg="serving metrics"[^\n]* addr=(\S+)`)

// metricsAddr waits for the stage's "serving metrics" log line.
func (p *e2eProc) metricsAddr() string {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := metricsAddrRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("wmrl %s logged no serving-metrics line", p.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkMetrics(t *testing.T, p *e2eProc, stageMetrics bool) {
	t.Helper()
	addr := p.metricsAddr()
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("wmrl %s GET %s: %v", p.name, path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("wmrl %s GET %s: %d %v\n%s", p.name, path, resp.StatusCode, err, body)
		}
		return string(body)
	}
	if body := get("/healthz"); strings.TrimSpace(body) != "ok" {
		t.Errorf("wmrl %s /healthz = %q", p.name, body)
	}
	body := get("/metrics")
	if stageMetrics && !strings.Contains(body, `wmrl_stage_records_total{`) {
		t.Errorf("wmrl %s /metrics has no wmrl_stage_records_total:\n%s", p.name, body)
	}
	if !strings.Contains(body, "# TYPE ") {
		t.Errorf("wmrl %s /metrics is not Prometheus text:\n%s", p.name, body)
	}
}

var digestLineRE = regexp.MustCompile(`^digest [0-9a-f]{64} rows (\d+) steps (\d+)$`)

// pollDigest runs `wmrl digest` until it reports every step, and returns its line.
func (h *e2eHarness) pollDigest(limit time.Duration) string {
	h.t.Helper()
	return h.pollDigestRun(e2eRun, e2eSteps, limit)
}

// pollDigestRun runs `wmrl digest` for run until it reports steps steps.
func (h *e2eHarness) pollDigestRun(run string, steps int, limit time.Duration) string {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for {
		out, errOut, code := h.try(time.Minute, "digest", "--run", run, "--timeout", "30s")
		line := strings.TrimSpace(out)
		if m := digestLineRE.FindStringSubmatch(line); code == 0 && m != nil && m[2] == strconv.Itoa(steps) {
			return line
		}
		last = fmt.Sprintf("exit %d stdout %q stderr %q", code, out, errOut)
		if time.Now().After(deadline) {
			h.t.Fatalf("wmrl digest did not report %d steps within %v; last: %s", steps, limit, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

var trainLineRE = regexp.MustCompile(`^run (\S+) step (\d+) rows (\d+) masked (\d+) `)

func checkTrainOutput(t *testing.T, out string, rowsPerStep int) {
	t.Helper()
	var steps []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := trainLineRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("train printed an unexpected line %q", line)
			continue
		}
		if m[1] != e2eRun || m[3] != strconv.Itoa(rowsPerStep) {
			t.Errorf("train line %q: want run %s and %d rows", line, e2eRun, rowsPerStep)
		}
		steps = append(steps, m[2])
	}
	if got, want := strings.Join(steps, ","), "0,1,2,3"; got != want {
		t.Errorf("train printed steps %s, want %s:\n%s", got, want, out)
	}
}

// readCommitted returns every record value of topic, read_committed from the start to the last
// stable offset.
func readCommitted(ctx context.Context, t *testing.T, opts []kgo.Opt, topic string) [][]byte {
	t.Helper()
	var values [][]byte
	for _, r := range readCommittedRecords(ctx, t, opts, topic) {
		values = append(values, r.Value)
	}
	return values
}

// readCommittedRecords is readCommitted keeping the records (headers: the content-type).
func readCommittedRecords(ctx context.Context, t *testing.T, opts []kgo.Opt, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	cl.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	open := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			open[o.Partition] = o.Offset
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(open) == 0 {
		return nil
	}
	cl, err = kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers advance the position too; without them a partition ending in one never ends.
		kgo.KeepControlRecords())...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(open) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d partitions not read to the end: %v", topic, len(open), ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := open[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
			if r.Offset+1 >= end {
				delete(open, r.Partition)
			}
		})
	}
	return recs
}

// e2eScoreArgv is the sandbox's --argv (a JSON array) that runs testdata/e2e/score.sh, the
// anchor task of the end-to-end tests.
func e2eScoreArgv(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "e2e", "score.sh"))
	if err != nil {
		t.Fatal(err)
	}
	argv, err := json.Marshal([]string{"/bin/sh", script, "{artifact}"})
	if err != nil {
		t.Fatal(err)
	}
	return string(argv)
}

// checkAdvantageTopic reads run e2eRun's steps from the advantages topic, checks their rows
// against rollouts and the digest line wmrl digest printed live (over steps steps), and returns
// the rows.
func checkAdvantageTopic(ctx context.Context, t *testing.T, opts []kgo.Opt, topic string, rollouts []e2eRollout, live string, steps int) []topics.AdvantageRow {
	t.Helper()
	read, _, err := trainer.ReadTopicSteps(ctx, opts, topic, e2eRun)
	if err != nil {
		t.Fatalf("read advantages: %v", err)
	}
	var rows []topics.AdvantageRow
	for _, st := range read {
		rows = append(rows, st.Rows...)
	}
	checkAdvantages(t, rows, rollouts)
	if want := fmt.Sprintf("digest %s rows %d steps %d", topics.DigestRows(rows), len(rollouts), steps); live != want {
		t.Errorf("wmrl digest printed %q, rows read from the topic give %q", live, want)
	}
	return rows
}

// onePerRollout returns each rollout's one item (what names them) by its id; a rollout with
// none or several, or an item of no rollout, is an error.
func onePerRollout[T any](t *testing.T, what string, items []T, id func(T) string, rollouts []e2eRollout) map[string]T {
	t.Helper()
	got := map[string][]T{}
	for _, it := range items {
		got[id(it)] = append(got[id(it)], it)
	}
	if len(got) != len(rollouts) {
		t.Errorf("%s for %d rollouts, want %d", what, len(got), len(rollouts))
	}
	one := map[string]T{}
	for _, r := range rollouts {
		if its := got[r.id]; len(its) != 1 {
			t.Errorf("rollout %s: %d %s, want 1", r.id, len(its), what)
		} else {
			one[r.id] = its[0]
		}
	}
	return one
}

func checkPredicted(t *testing.T, recs []*kgo.Record, rollouts []e2eRollout) {
	t.Helper()
	var ps []topics.PredictedReward
	for _, v := range recs {
		p, err := topics.DecodePredictedRecord(v)
		if err != nil {
			t.Fatalf("predicted record: %v", err)
		}
		if p.RunID != e2eRun {
			t.Errorf("predicted record of run %q", p.RunID)
		}
		ps = append(ps, p)
	}
	got := onePerRollout(t, "predicted records", ps, func(p topics.PredictedReward) string { return p.RolloutID }, rollouts)
	for _, r := range rollouts {
		p, ok := got[r.id]
		if !ok {
			continue
		}
		if p.Anchor != r.anchor || p.GroupID != r.group || p.Step != r.step {
			t.Errorf("rollout %s: predicted record %+v does not match anchor %v group %s step %d", r.id, p, r.anchor, r.group, r.step)
		}
		if r.invalidWM {
			if p.Status != topics.StatusInvalid || p.Reason == "" || p.Score != nil {
				t.Errorf("rollout %s (out-of-range reply): status %q reason %q score %v, want invalid with a reason", r.id, p.Status, p.Reason, p.Score)
			}
			continue
		}
		if p.Status != topics.StatusOK || p.Score == nil || strconv.FormatFloat(*p.Score, 'f', 2, 64) != r.wm {
			t.Errorf("rollout %s: predicted status %q score %v reason %q, want ok %s", r.id, p.Status, p.Score, p.Reason, r.wm)
		}
	}
}

func checkExecuted(t *testing.T, recs []*kgo.Record, rollouts []e2eRollout) {
	t.Helper()
	got := map[string][]topics.ExecutedReward{}
	for _, v := range recs {
		e, err := topics.DecodeExecutedRecord(v)
		if err != nil {
			t.Fatalf("executed record: %v", err)
		}
		got[e.RolloutID] = append(got[e.RolloutID], e)
	}
	anchors := 0
	for _, r := range rollouts {
		es := got[r.id]
		if !r.anchor {
			if len(es) != 0 {
				t.Errorf("world-model rollout %s has %d executed records, want none", r.id, len(es))
			}
			continue
		}
		anchors++
		if len(es) != 1 {
			t.Errorf("anchor rollout %s: %d executed records, want 1", r.id, len(es))
			continue
		}
		e := es[0]
		if r.sandboxTTL {
			if e.Status != topics.StatusTimeout || e.Reason == "" || e.Score != nil || e.Imputed {
				t.Errorf("rollout %s (sleeps past --timeout): status %q reason %q score %v imputed %v, want timeout with a reason and no score",
					r.id, e.Status, e.Reason, e.Score, e.Imputed)
			}
			continue
		}
		if e.Status != topics.StatusOK || e.Score == nil || strconv.FormatFloat(*e.Score, 'f', 2, 64) != r.exec {
			t.Errorf("rollout %s: executed status %q score %v reason %q stderr %q, want ok %s", r.id, e.Status, e.Score, e.Reason, e.StderrTail, r.exec)
		}
	}
	if len(recs) != anchors {
		t.Errorf("%d executed records, want one per anchor rollout (%d)", len(recs), anchors)
	}
}

func checkAdvantages(t *testing.T, rows []topics.AdvantageRow, rollouts []e2eRollout) {
	t.Helper()
	got := onePerRollout(t, "advantage rows", rows, func(r topics.AdvantageRow) string { return r.RolloutID }, rollouts)
	for _, r := range rollouts {
		row, ok := got[r.id]
		if !ok {
			continue
		}
		wantMask := !r.sandboxTTL && !r.invalidWM
		if row.Mask != wantMask {
			t.Errorf("rollout %s: mask %v, want %v (row %+v)", r.id, row.Mask, wantMask, row)
		}
		if !row.Mask {
			if row.Advantage != 0 || row.Weight != 0 {
				t.Errorf("masked rollout %s: advantage %v weight %v, want 0", r.id, row.Advantage, row.Weight)
			}
			continue
		}
		wantSource, used := topics.SourceWorldModel, r.wm
		if r.anchor {
			wantSource, used = topics.SourceAnchor, r.exec
		}
		// Fewer than MinPairs anchor pairs exist, so calibration is the identity map.
		if row.Source != wantSource || strconv.FormatFloat(row.Used, 'f', 2, 64) != used {
			t.Errorf("rollout %s: source %q used %v, want %q %s", r.id, row.Source, row.Used, wantSource, used)
		}
	}
}

// e2eCleanup deletes the test's topics, consumer groups and Redis keys.
func e2eCleanup(t *testing.T, brokers []string, redisURL, prefix, unique string, groups map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...)); err != nil {
		t.Logf("cleanup: kafka client: %v", err)
	} else {
		adm := kadm.NewClient(cl)
		var gs []string
		for _, g := range groups {
			gs = append(gs, g)
		}
		if _, err := adm.DeleteGroups(ctx, gs...); err != nil {
			t.Logf("cleanup: delete groups: %v", err)
		}
		if listed, err := adm.ListTopics(ctx); err != nil {
			t.Logf("cleanup: list topics: %v", err)
		} else {
			var mine []string
			for _, name := range listed.Names() {
				if strings.HasPrefix(name, prefix) {
					mine = append(mine, name)
				}
			}
			if len(mine) > 0 {
				if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
					t.Logf("cleanup: delete topics: %v", err)
				}
			}
		}
		cl.Close()
	}
	ro, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Logf("cleanup: redis url: %v", err)
		return
	}
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, unique+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("cleanup: scan redis: %v", err)
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			t.Logf("cleanup: unlink %d redis keys: %v", len(keys), err)
		}
	}
}
