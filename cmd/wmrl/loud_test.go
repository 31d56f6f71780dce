package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/dashboard"
	"github.com/wmrl/wmrl/internal/testenv"
)

// TestScoringFailuresAreLoud runs the real stages on the real broker against the failures that
// used to pass silently — a judge answering non-JSON, a judge that goes down after start-up, a
// sandbox script that does not exist — and requires for each, within seconds, a warning naming
// the error, a 503 from /healthz/scoring and failed (not ok) records in
// wmrl_stage_records_total; and from `correct` a masked-share warning and gauge.
func TestScoringFailuresAreLoud(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	bin := buildWMRL(t, t.TempDir())
	const run = "loud-run"
	// Steps × groups × rollouts: enough results for the failure window below.
	var rollouts []e2eRollout
	for s := int64(0); s < 3; s++ {
		for g := 0; g < 2; g++ {
			gid := fmt.Sprintf("%d-g%d", s, g)
			for i := 0; i < 4; i++ {
				rollouts = append(rollouts, e2eRollout{id: fmt.Sprintf("%s-%d", gid, i), group: gid, step: s, wm: "0.5", exec: "0.5"})
			}
		}
	}
	input := filepath.Join(t.TempDir(), "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)

	// pipeline makes a prefix's topics; publish sends the rollouts, every group an anchor.
	publish := func(h *e2eHarness) {
		// --end-run=false: the run stays live, so correct keeps its per-run gauges (masked share).
		h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", input, "--run", run, "--anchor-fraction", "1", "--end-run=false")
	}
	pipeline := func(name string) *e2eHarness {
		prefix := unique + "-" + name + "."
		groups := map[string]string{}
		for _, st := range []string{"worldmodel", "sandbox", "correct", "train"} {
			groups[st] = unique + "-" + name + "-" + st
		}
		t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique+"-"+name, groups) })
		h := &e2eHarness{t: t, bin: bin, global: []string{"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}}
		t.Cleanup(h.stopAll)
		h.run(time.Minute, 0, "topics", "create", "--partitions", "1")
		return h
	}
	stageFlags := func(h *e2eHarness, st string) []string {
		return []string{"--metrics-addr", "127.0.0.1:0", "--group", strings.TrimSuffix(h.global[len(h.global)-1], ".") + "-" + st,
			"--failure-window", "8", "--max-failure-share", "0.5"}
	}
	wmFlags := []string{"--backend", "openai", "--model", "m", "--concurrency", "2", "--max-attempts", "1", "--request-timeout", "2s"}

	// The judge that answers non-JSON: a proxy's error page with status 200.
	htmlJudge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
	}))
	t.Cleanup(htmlJudge.Close)
	// The judge that goes down: it answers the start-up probe, then stops listening.
	downJudge := httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(downJudge.Close)

	a := pipeline("a")
	publish(a)
	argv, err := json.Marshal([]string{"/bin/sh", "/nonexistent/score.sh", "{artifact}"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	html := a.start("worldmodel non-JSON", cat([]string{"worldmodel", "--base-url", htmlJudge.URL + "/v1"}, wmFlags, stageFlags(a, "worldmodel"))...)
	sb := a.start("sandbox missing script", cat([]string{"sandbox", "--single-step-no-private", "--argv", string(argv), "--slots", "2", "--timeout", "10s"}, stageFlags(a, "sandbox"))...)
	corr := a.start("correct", "correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique+"-txn",
		"--group", unique+"-a-correct", "--redis-prefix", unique+"-a")

	b := pipeline("b")
	down := b.start("worldmodel judge down", cat([]string{"worldmodel", "--base-url", downJudge.URL + "/v1"}, wmFlags, stageFlags(b, "worldmodel"))...)
	waitFor(t, down, 30*time.Second, "partitions", func() bool { return strings.Contains(down.stderr.String(), "partitions assigned") })
	downJudge.Close() // after the start-up probe passed, before the first rollout
	publish(b)

	cases := []struct {
		p          *e2eProc
		stage      string
		firstError string
	}{
		{html, "worldmodel", "invalid"},
		{down, "worldmodel", "connection refused"},
		{sb, "sandbox", "/nonexistent/score.sh"},
	}
	for _, c := range cases {
		t.Run(c.p.name, func(t *testing.T) {
			waitFor(t, c.p, 20*time.Second, "a warning with the first error", func() bool {
				return regexp.MustCompile(`level=WARN msg="` + c.stage + ` failures[^\n]*first_error="[^\n]*` + regexp.QuoteMeta(c.firstError)).MatchString(c.p.stderr.String())
			})
			addr := c.p.metricsAddr()
			waitFor(t, c.p, 20*time.Second, "/healthz/scoring 503", func() bool {
				code, _ := httpGet(t, "http://"+addr+"/healthz/scoring")
				return code == http.StatusServiceUnavailable
			})
			_, body := httpGet(t, "http://"+addr+"/healthz/scoring")
			_, metrics := httpGet(t, "http://"+addr+"/metrics")
			failed := metricValue(metrics, `wmrl_stage_records_total{result="failed",stage="`+c.stage+`"}`)
			ok := metricValue(metrics, `wmrl_stage_records_total{result="ok",stage="`+c.stage+`"}`)
			if failed < 8 || ok != 0 {
				t.Errorf("records failed %v ok %v, want ≥ 8 failed and none ok", failed, ok)
			}
			t.Logf("%s: warned, /healthz/scoring 503 %v after start: %s", c.p.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(body))
		})
	}
	t.Run("correct masked share", func(t *testing.T) {
		waitFor(t, corr, 60*time.Second, "a masked-step warning", func() bool {
			return strings.Contains(corr.stderr.String(), `level=WARN msg="step mostly masked`)
		})
		_, metrics := httpGet(t, "http://"+corr.metricsAddr()+"/metrics")
		if v := metricValue(metrics, `wmrl_correct_masked_share{run="`+run+`",stream="main"}`); v != 1 {
			t.Errorf("wmrl_correct_masked_share = %v, want 1 (every row lacks a reward)", v)
		}
	})
	t.Run("dashboard shows the failures", func(t *testing.T) {
		p := a.start("dashboard", "dashboard", "--listen", "127.0.0.1:0", "--no-redis")
		var url string
		waitFor(t, p, 30*time.Second, "the page's URL", func() bool {
			m := regexp.MustCompile(`wmrl dashboard: (http://\S+/)`).FindStringSubmatch(p.stderr.String())
			if m != nil {
				url = m[1]
			}
			return m != nil
		})
		var st dashboard.State
		waitFor(t, p, 30*time.Second, "both stages' failures and the masked steps on the page", func() bool {
			_, body := httpGet(t, url+"api/state")
			st = dashboard.State{}
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				return false
			}
			red := 0
			for _, h := range st.Scoring {
				if h.RecentFailedShare > dashboard.ScoringAlarm && h.Failed == len(rollouts) {
					red++
				}
			}
			masked := len(st.Runs) == 1 && len(st.Runs[0].Steps) == 3
			for _, s := range st.Runs {
				for _, step := range s.Steps {
					masked = masked && step.Rows > 0 && step.MaskedRows == step.Rows
				}
			}
			return red == 2 && masked
		})
		t.Logf("dashboard scoring: %+v", st.Scoring)
		p.terminate(10 * time.Second)
	})
	t.Run("train says so per step", func(t *testing.T) {
		out, errOut, code := a.try(time.Minute, "train", "--run", run, "--max-steps", "3", "--group", unique+"-a-train")
		if code != 0 || strings.Count(errOut, "every row of the step is masked") != 3 || !strings.Contains(out, "rows 8 masked 8") {
			t.Errorf("train: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a masked warning per step", code, out, errOut)
		}
	})
	t.Run("train names wrong wiring", func(t *testing.T) {
		cases := []struct {
			h     *e2eHarness
			run   string
			wants []string
		}{
			// Prefix a: advantages of loud-run exist and correct runs, but the run id is wrong.
			{a, "lod-run", []string{`holds no record of run \"lod-run\"`, "runs seen: " + run}},
			// Prefix b: no correction consumer, so no advantages at all.
			{b, run, []string{"holds no advantages yet", "no consumer group with live members reads", "wmrl correct --topic-prefix"}},
		}
		for i, c := range cases {
			p := c.h.start(fmt.Sprintf("train %d", i), "train", "--run", c.run, "--group", unique+"-"+strings.TrimSuffix(strings.TrimPrefix(c.h.global[len(c.h.global)-1], unique+"-"), ".")+"-train")
			waitFor(t, p, 15*time.Second, "wiring warnings", func() bool {
				for _, w := range c.wants {
					if !strings.Contains(p.stderr.String(), w) {
						return false
					}
				}
				return true
			})
			for _, line := range strings.Split(p.stderr.String(), "\n") {
				if strings.Contains(line, "no step yet") {
					t.Log(line)
				}
			}
			if c.run != run && strings.Contains(p.stderr.String(), "no consumer group with live members") {
				t.Errorf("prefix with a running correct consumer reported none:\n%s", p.stderr.String())
			}
			p.terminate(10 * time.Second)
		}
	})
	for _, p := range []*e2eProc{html, sb, corr, down} {
		p.terminate(30 * time.Second)
	}
}

// waitFor polls cond every 100 ms until it holds, failing after limit with the process's log.
func waitFor(t *testing.T, p *e2eProc, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("wmrl %s: no %s within %v; log:\n%s", p.name, what, limit, p.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue is the value of the sample named exactly series (name{labels} as exposed) in a
// Prometheus text exposition, or -1 when absent.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
