package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

// The real `wmrl worldmodel` and `wmrl sandbox` processes on the real broker meet a rollouts batch
// that decompresses to 256 MiB between rollouts: each dead-letters it by reference (reason
// batch-too-large, its offset range), counts it, scores the rollouts after it, and its peak RSS
// stays inside the documented bound; restarted, neither meets the batch again.
func TestBombRolloutStages(t *testing.T) {
	s := newRolloutStages(t, buildWMRLForRSS(t))
	brokers, names, count, dead := s.brokers, s.names, s.count, s.dead
	rollout := s.rollout
	testenv.Produce(t, brokers, []*kgo.Record{rollout(0)})
	bomb := testenv.Bomb(t, brokers, names.Rollouts(), 0, 256<<20)
	testenv.Produce(t, brokers, []*kgo.Record{rollout(1), rollout(2)})
	start, readUntil := s.start, s.reader(3*time.Minute)

	procs := start()
	readUntil(3)
	limit := topics.MaxBatchBytes(topics.MaxRecordBytes)
	for _, p := range procs {
		if v := scrapeCounter(t, p, oversize.MetricName); v != 1 {
			t.Errorf("wmrl %s: %s = %v, want 1", p.name, oversize.MetricName, v)
		}
		d, ok := dead[p.name]
		if !ok || d.Reason != topics.ReasonBatchTooLarge || d.SourceTopic != names.Rollouts() || d.SourcePartition != 0 ||
			d.SourceOffset != bomb.BaseOffset || d.SourceEndOffset != bomb.NextOffset || d.LimitBytes != limit || d.Value != nil ||
			d.CompressedBytes != bomb.CompressedBytes+testenv.BatchHeaderBytes {
			t.Errorf("wmrl %s dead letter %+v, want a reference to offsets [%d, %d)", p.name, d, bomb.BaseOffset, bomb.NextOffset)
		}
	}
	for _, p := range procs {
		peak := testenv.PeakRSS(t, p.cmd.Process.Pid) // VmHWM while it runs: see watchPeakRSS
		p.terminate(30 * time.Second)
		t.Logf("wmrl %s: peak RSS %d MiB under a %d MiB bomb (limit %d MiB)", p.name, peak>>20, bomb.DecompressedBytes>>20, limit>>20)
		if bound := int64(rolloutStageBaseBytes + oversize.PeakFactor*limit); peak > bound {
			t.Errorf("wmrl %s: peak RSS %d MiB, over the documented bound of %d MiB", p.name, peak>>20, bound>>20)
		}
	}

	// Restarted, both resume after the batch: one more rollout is scored, nothing is skipped.
	testenv.Produce(t, brokers, []*kgo.Record{rollout(3)})
	procs = start()
	readUntil(4)
	time.Sleep(time.Second)
	for _, p := range procs {
		if v := scrapeCounter(t, p, oversize.MetricName); v != 0 {
			t.Errorf("restarted wmrl %s met the batch again: %s = %v", p.name, oversize.MetricName, v)
		}
		peak := testenv.PeakRSS(t, p.cmd.Process.Pid)
		p.terminate(30 * time.Second)
		t.Logf("restarted wmrl %s (no bomb met): peak RSS %d MiB", p.name, peak>>20)
	}
	if count[names.Predicted()] != 4 || count[names.Executed()] != 4 || count[names.DLQ()] != 2 {
		t.Errorf("records per topic %v: want 4 predicted, 4 executed, 2 dead letters", count)
	}
}

// rolloutStageBaseBytes is the RSS budget of a wmrl stage process besides refused batches
// (docs/reliability.md): the runtime, its clients and a few records in flight (measured 75-83 MiB
// for worldmodel and sandbox that met no bomb).
const rolloutStageBaseBytes = 96 << 20

// runPeakRSS runs cmd to its end and returns its combined output and its peak RSS: VmHWM of
// /proc/<pid>/status, sampled while it runs. Not getrusage's ru_maxrss: that keeps the peak of
// the memory the child was forked from (os/exec's vfork shares the test binary's, whose RSS
// under -race is 300–400 MiB) and so measures the test, not the stage.
func runPeakRSS(cmd *exec.Cmd) ([]byte, int64, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := testenv.VmHWM(cmd.Process.Pid)
			if err != nil { // gone, or a zombie with no memory left to report
				return
			}
			peak.Store(max(peak.Load(), n))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err := cmd.Wait()
	<-done
	return out.Bytes(), peak.Load(), err
}

// scrapeCounter sums the samples of a counter on a stage's /metrics.
func scrapeCounter(t *testing.T, p *e2eProc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr() + "/metrics")
	if err != nil {
		t.Fatalf("wmrl %s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`)
	var sum float64
	found := false
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("wmrl %s: %s: %v", p.name, m[0], err)
		}
		sum, found = sum+v, true
	}
	if !found {
		t.Fatalf("wmrl %s /metrics has no %s", p.name, name)
	}
	return sum
}

// `wmrl replay` over input topics whose run partition holds a bomb each (steps, predicted,
// executed) finishes: it warns once per batch, leaves it out (the live consumers skip it too) and
// its peak RSS stays inside the bound. The run has no other records, so it replays no step.
func TestBombReplay(t *testing.T) {
	brokers := testenv.Kafka(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	redisURL := testenv.Redis(t)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, nil) })
	h := &e2eHarness{t: t, bin: buildWMRLForRSS(t), global: []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")
	for _, topic := range []string{names.Steps(), names.Predicted(), names.Executed()} {
		testenv.Bomb(t, brokers, topic, 0, 256<<20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := h.command(ctx, "replay", "--run", "r", "--out", t.TempDir()+"/replay.bin", "--no-redis")
	out, peak, err := runPeakRSS(cmd)
	if err != nil {
		t.Fatalf("wmrl replay: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "reason="+topics.ReasonBatchTooLarge); n != 3 {
		t.Errorf("wmrl replay warned of %d refused batches, want 3:\n%s", n, out)
	}
	if !strings.Contains(string(out), "steps=0") {
		t.Errorf("wmrl replay printed no steps=0 summary:\n%s", out)
	}
	limit := topics.MaxBatchBytes(topics.MaxRecordBytes)
	t.Logf("wmrl replay: peak RSS %d MiB under three 256 MiB bombs (limit %d MiB)", peak>>20, limit>>20)
	if bound := int64(rolloutStageBaseBytes + oversize.PeakFactor*limit); peak > bound {
		t.Errorf("wmrl replay: peak RSS %d MiB, over the documented bound of %d MiB", peak>>20, bound>>20)
	}
}

var dashboardURLRE = regexp.MustCompile(`wmrl dashboard: (http://\S+)`)

// The real `wmrl train` and `wmrl dashboard` processes meet a bomb on the advantages topic between
// steps: train delivers every step, logs and counts the skip, stays inside the bound, and a
// second train run of the group starts after the batch; the dashboard counts the steps' records
// and the skipped batch and stays inside the bound.
func TestBombSinks(t *testing.T) {
	brokers := testenv.Kafka(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	group := unique + "-train"
	redisURL := testenv.Redis(t)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{"train": group}) })
	h := &e2eHarness{t: t, bin: buildWMRLForRSS(t), global: []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")
	chunks := 0
	step := func(s int64) {
		recs := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", s, 4, 8), 4096)
		testenv.Produce(t, brokers, recs)
		chunks += len(recs)
	}
	step(0)
	testenv.Bomb(t, brokers, names.Advantages(), 0, 256<<20)
	step(1)
	limit := topics.MaxBatchBytes(topics.MaxAdvantageBytes)
	bound := int64(rolloutStageBaseBytes + oversize.PeakFactor*limit)

	train := func(steps int) (string, int64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := h.command(ctx, "train", "--run", "a", "--max-steps", strconv.Itoa(steps), "--group", group)
		out, peak, err := runPeakRSS(cmd)
		if err != nil {
			t.Fatalf("wmrl train: %v\n%s", err, out)
		}
		return string(out), peak
	}
	out, peak := train(2)
	t.Logf("wmrl train: peak RSS %d MiB under a 256 MiB bomb (limit %d MiB)", peak>>20, limit>>20)
	if !strings.Contains(out, "run a step 0 ") || !strings.Contains(out, "run a step 1 ") ||
		strings.Count(out, "reason="+topics.ReasonBatchTooLarge) != 1 || !strings.Contains(out, "skipped_batches=1") {
		t.Errorf("wmrl train: want steps 0 and 1, one batch-too-large warning and skipped_batches=1:\n%s", out)
	}
	if peak > bound {
		t.Errorf("wmrl train: peak RSS %d MiB, over the documented bound of %d MiB", peak>>20, bound>>20)
	}
	step(2)
	if out, _ := train(1); !strings.Contains(out, "run a step 2 ") || strings.Contains(out, topics.ReasonBatchTooLarge) {
		t.Errorf("restarted wmrl train: want step 2 and no batch-too-large:\n%s", out)
	}

	p := h.start("dashboard", "dashboard", "--listen", "127.0.0.1:0", "--no-redis")
	var url string
	deadline := time.Now().Add(time.Minute)
	for {
		var st struct {
			SkippedBatches int64 `json:"skipped_batches"`
			Topics         []struct {
				Topic   string `json:"topic"`
				Records int64  `json:"records"`
			} `json:"topics"`
		}
		if m := dashboardURLRE.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
			if resp, err := http.Get(url + "/api/state"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err := json.Unmarshal(body, &st); err != nil {
					t.Fatalf("dashboard /api/state: %v", err)
				}
			}
		}
		var seen int64
		for _, tr := range st.Topics {
			if tr.Topic == names.Advantages() {
				seen = tr.Records
			}
		}
		if st.SkippedBatches == 1 && seen == int64(chunks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard at %q: %d skipped batches, %d of %d advantage records", url, st.SkippedBatches, seen, chunks)
		}
		time.Sleep(100 * time.Millisecond)
	}
	peak = testenv.PeakRSS(t, p.cmd.Process.Pid)
	p.terminate(30 * time.Second)
	t.Logf("wmrl dashboard: peak RSS %d MiB under a 256 MiB bomb (limit %d MiB)", peak>>20, limit>>20)
	if peak > bound {
		t.Errorf("wmrl dashboard: peak RSS %d MiB, over the documented bound of %d MiB", peak>>20, bound>>20)
	}
}

// buildWMRLForRSS builds the binary without -race, whatever the test binary has: these tests hold
// a process's peak RSS to the documented bound of the binary users run, and ThreadSanitizer
// multiplies a process's memory (a -race replay peaked at 415 MiB where the plain one stays
// under 224).
func buildWMRLForRSS(t *testing.T) string {
	t.Helper()
	bin := buildWMRLQuiet(t.TempDir())
	if !strings.HasPrefix(bin, "/") {
		t.Fatal(bin)
	}
	return bin
}
