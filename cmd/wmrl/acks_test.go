package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// TestOperationsAreAcknowledged runs worldmodel and correct on the real broker and Redis, seals
// steps 0-2 of a run and then asks what used to be answered "ended", exit 0, whatever correct
// did with the request:
//   - `runs end --last-step 1` after step 2 was sealed: correct dead-letters the marker as a
//     conflict; now runs end exits 1 with the reason and correct logs the refusal (reason and
//     last step);
//   - `runs end --last-step 2`: accepted, the run retires; runs end says so after correct's
//     verdict and correct logs the run's end;
//   - `generate` into the ended run used to publish every rollout (all dead-lettered run_ended);
//     now it exits non-zero before publishing;
//   - a request correct never judges (another --redis-prefix) exits 3 after --wait;
//   - a second run idle for --run-idle-timeout ends with a log line naming reason idle.
func TestOperationsAreAcknowledged(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	groups := map[string]string{"worldmodel": unique + "-worldmodel", "correct": unique + "-correct"}
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, groups) })
	dir := t.TempDir()
	h := &e2eHarness{t: t, bin: buildWMRL(t, dir), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")

	judge := httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(judge.Close)
	h.start("worldmodel", "worldmodel", "--base-url", judge.URL+"/v1", "--model", "m", "--concurrency", "4",
		"--metrics-addr", "127.0.0.1:0", "--group", groups["worldmodel"])
	corr := h.start("correct", "correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique+"-txn",
		"--group", groups["correct"], "--redis-prefix", unique, "--run-idle-timeout", "20s")

	publish := func(run string, steps int64) string {
		var rollouts []e2eRollout
		for s := int64(0); s < steps; s++ {
			for i := 0; i < 2; i++ {
				rollouts = append(rollouts, e2eRollout{id: fmt.Sprintf("%d-g-%d", s, i), group: fmt.Sprintf("%d-g", s), step: s, wm: "0.5", exec: "0.5"})
			}
		}
		input := filepath.Join(dir, run+".jsonl")
		writeE2EInput(t, input, rollouts)
		return input
	}
	input := publish("acked", 3)
	h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", input, "--run", "acked", "--anchor-fraction", "0", "--end-run=false")

	rdb := redis.NewClient(mustRedisOpts(t, redisURL))
	t.Cleanup(func() { rdb.Close() })
	st := statestore.New(rdb, unique, 0)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if h, err := st.ReadHead(context.Background(), "acked", "main"); err == nil && h != nil && h.SealedStep == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step 2 of run acked not sealed in Redis; correct's log:\n%s", corr.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	t.Run("refused end exits 1 with the reason", func(t *testing.T) {
		out, errOut, code := h.try(time.Minute, "runs", "end", "acked", "--last-step", "1", "--redis-prefix", unique)
		if code != 1 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "reason conflict") ||
			!strings.Contains(errOut, "step 2 is already sealed") || strings.Contains(out, "ended") {
			t.Errorf("runs end --last-step 1: exit %d\nstdout %q\nstderr %q\nwant exit 1, conflict named", code, out, errOut)
		}
		waitFor(t, corr, 10*time.Second, "a log line of the refusal", func() bool {
			return regexp.MustCompile(`level=WARN msg="end-of-run record refused"[^\n]* run=acked last_step=1 [^\n]*reason=conflict`).MatchString(corr.stderr.String())
		})
	})
	t.Run("accepted end waits for the run's end", func(t *testing.T) {
		out, errOut, code := h.try(time.Minute, "runs", "end", "acked", "--last-step", "2", "--redis-prefix", unique)
		if code != 0 || !strings.Contains(out, "run acked ended after step 2") {
			t.Errorf("runs end --last-step 2: exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		waitFor(t, corr, 10*time.Second, "a log line of the run's end", func() bool {
			return regexp.MustCompile(`level=INFO msg="run ended"[^\n]* run=acked last_step=2 end_reason=marker`).MatchString(corr.stderr.String())
		})
	})
	t.Run("generate into the ended run is refused", func(t *testing.T) {
		before := len(readTopic(t, brokers, names.Rollouts()))
		out, errOut, code := h.try(time.Minute, "generate", "--backend", "jsonl", "--input", publish("again", 5), "--run", "acked",
			"--anchor-fraction", "0", "--redis-prefix", unique)
		if code == 0 || !strings.Contains(errOut, "run acked ended after step 2") || strings.Contains(out, "published") {
			t.Errorf("generate into an ended run: exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		if after := len(readTopic(t, brokers, names.Rollouts())); after != before {
			t.Errorf("%d rollouts published into the ended run", after-before)
		}
	})
	t.Run("no verdict exits 3", func(t *testing.T) {
		_, errOut, code := h.try(time.Minute, "runs", "end", "acked", "--last-step", "2", "--redis-prefix", unique+"-elsewhere", "--wait", "2s")
		if code != 3 || !strings.Contains(errOut, "no verdict within --wait 2s") {
			t.Errorf("runs end without a verdict: exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("idle end is logged", func(t *testing.T) {
		h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", publish("idle", 1), "--run", "idle", "--anchor-fraction", "0", "--end-run=false")
		waitFor(t, corr, 60*time.Second, "a log line of the idle run's end", func() bool {
			return regexp.MustCompile(`level=INFO msg="run ended"[^\n]* run=idle last_step=0 end_reason=idle`).MatchString(corr.stderr.String())
		})
	})
}

func mustRedisOpts(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
