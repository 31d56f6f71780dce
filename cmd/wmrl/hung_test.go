package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestHungJudgeIsSeen runs the worldmodel stage with default flags on the real broker against a
// judge that accepts every scoring request and never answers. Before, nothing was logged and
// /healthz/scoring stayed 200 until the requests timed out after every retry (about 4 minutes
// with the default --request-timeout and --max-attempts); now the stage warns, naming the
// stall, and /healthz/scoring answers 503 within 15 s of the first request.
func TestHungJudgeIsSeen(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	group := unique + "-worldmodel"
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{"worldmodel": group}) })

	var requests atomic.Int64
	hang := make(chan struct{})
	judge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		requests.Add(1)
		select { // accepted, never answered
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	t.Cleanup(judge.Close)
	t.Cleanup(func() { close(hang) })

	h := &e2eHarness{t: t, bin: buildWMRL(t, t.TempDir()), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")
	// Default flags but for where to find the judge, the group and a free metrics port.
	wm := h.start("worldmodel", "worldmodel", "--base-url", judge.URL+"/v1", "--model", "m",
		"--group", group, "--metrics-addr", "127.0.0.1:0")
	waitFor(t, wm, 30*time.Second, "partitions", func() bool { return strings.Contains(wm.stderr.String(), "partitions assigned") })
	addr := wm.metricsAddr()

	var rollouts []e2eRollout
	for i := 0; i < 4; i++ {
		rollouts = append(rollouts, e2eRollout{id: fmt.Sprintf("0-g-%d", i), group: "0-g", step: 0, wm: "0.5", exec: "0.5"})
	}
	input := filepath.Join(t.TempDir(), "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)
	h.run(time.Minute, 0, "generate", "--backend", "jsonl", "--input", input, "--run", "hung", "--end-run=false")

	// A generous harness deadline for the request to arrive; the bound under test starts there.
	deadline := time.Now().Add(30 * time.Second)
	for requests.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the judge got no scoring request; log:\n%s", wm.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	first := time.Now()
	waitFor(t, wm, 15*time.Second, "stall warning", func() bool {
		return strings.Contains(wm.stderr.String(), `level=WARN msg="worldmodel stalled`)
	})
	waitFor(t, wm, 15*time.Second-time.Since(first), "/healthz/scoring 503", func() bool {
		code, _ := httpGet(t, "http://"+addr+"/healthz/scoring")
		return code == http.StatusServiceUnavailable
	})
	_, body := httpGet(t, "http://"+addr+"/healthz/scoring")
	if !strings.Contains(body, "no result") {
		t.Errorf("/healthz/scoring body %q does not name the stall", body)
	}
	t.Logf("stall warned and /healthz/scoring 503 %v after the first request: %s", time.Since(first).Round(100*time.Millisecond), strings.TrimSpace(body))
}
