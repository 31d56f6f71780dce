package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestTwoPipelinesDefaultIdentities runs two full pipelines on one broker and one Redis, each
// under its own topic prefix and otherwise with default flags (groups, correct's transactional
// and static member id, Redis prefixes), and on the first one two trainers of two runs at once
// with their default groups; the second pipeline uses one of the same run ids, so its Redis
// state must not meet the first's (each pipeline's `runs list` shows exactly its own runs). Every trainer gets every step of its run and exits 0 after the
// run's end, and every run's live digest equals its replay's. Before the identities derived from
// the topic prefix, the second correct fenced the first (one transactional id per host) and the
// trainers of one pipeline split one group's partitions, one of them starving.
func TestTwoPipelinesDefaultIdentities(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	dir := t.TempDir()
	bin := buildWMRL(t, dir)
	var wmRequests atomic.Int64
	wm := httptest.NewServer(testenv.WorldModel(&wmRequests))
	t.Cleanup(wm.Close)
	argv := e2eScoreArgv(t)
	rollouts := e2eWorkload(t)
	for i := range rollouts {
		rollouts[i].sandboxTTL = false // no 10 s timeouts: this test is about identities
	}
	input := filepath.Join(dir, "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)

	type pipeline struct {
		prefix string
		runs   []string
		h      *e2eHarness
		stages []*e2eProc
	}
	pipes := []*pipeline{
		{prefix: unique + "a.", runs: []string{"tenancy-1", "tenancy-2"}},
		{prefix: unique + "b.", runs: []string{"tenancy-1"}},
	}
	for _, p := range pipes {
		groups := map[string]string{}
		for _, g := range []string{"wmrl-worldmodel", "wmrl-sandbox", "wmrl-correct"} {
			groups[g] = p.prefix + g
		}
		for _, r := range p.runs {
			groups[r] = p.prefix + "wmrl-trainer-" + r
		}
		prefix := p.prefix
		t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, prefix, groups) })
		p.h = &e2eHarness{t: t, bin: bin, global: []string{
			"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", p.prefix,
		}}
		t.Cleanup(p.h.stopAll)
		p.h.run(time.Minute, 0, "topics", "create", "--partitions", "2")
	}
	// Only what cannot be shared on one host is set: the metrics ports.
	for _, p := range pipes {
		p.stages = []*e2eProc{
			p.h.start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", wm.URL+"/v1",
				"--model", "m", "--concurrency", "4", "--metrics-addr", "127.0.0.1:0"),
			p.h.start("sandbox", "sandbox", "--single-step-no-private", "--argv", argv, "--slots", "2", "--timeout", "10s",
				"--metrics-addr", "127.0.0.1:0"),
			p.h.start("correct", "correct", "--metrics-addr", "127.0.0.1:0"),
		}
	}
	// The trainers start before any record exists, as a user starts them next to the pipeline.
	trainers := map[string]*e2eProc{}
	for _, p := range pipes {
		for _, r := range p.runs {
			trainers[p.prefix+r] = p.h.start("train "+p.prefix+r, "train", "--run", r)
		}
	}
	for _, p := range pipes {
		for _, r := range p.runs {
			p.h.run(2*time.Minute, 0, "generate", "--backend", "jsonl", "--input", input,
				"--run", r, "--anchor-fraction", strconv.FormatFloat(e2eAnchor, 'g', -1, 64))
		}
	}
	for _, p := range pipes {
		for _, r := range p.runs {
			tr := trainers[p.prefix+r]
			select {
			case <-tr.done:
			case <-time.After(3 * time.Minute):
				t.Fatalf("train --run %s under %s did not exit within 3 minutes after its run ended:\n%s", r, p.prefix, tr.stderr.String())
			}
			if tr.err != nil {
				t.Fatalf("train --run %s under %s: %v\n%s", r, p.prefix, tr.err, tr.stderr.String())
			}
			checkTenancyTrain(t, tr.stderr.String(), r)
		}
	}
	for _, p := range pipes {
		for _, r := range p.runs {
			live := p.h.pollDigestRun(r, e2eSteps, 90*time.Second)
			out := filepath.Join(dir, strings.TrimSuffix(p.prefix, ".")+"-"+r+".bin")
			rout := p.h.run(2*time.Minute, 0, "replay", "--run", r, "--out", out)
			if !strings.Contains(rout, "incomplete_steps=0") {
				t.Errorf("%s run %s: replay printed %q, want no incomplete steps", p.prefix, r, rout)
			}
			replayed := strings.TrimSpace(p.h.run(time.Minute, 0, "digest", "--run", r, "--file", out))
			if replayed != live {
				t.Errorf("%s run %s: replay's digest %q, live %q", p.prefix, r, replayed, live)
			}
			t.Logf("%s run %s: %s (replay equal)", p.prefix, r, live)
		}
	}
	// Each pipeline's Redis state is its own: `runs list` with default flags finds exactly its runs,
	// ended at their last step.
	for _, p := range pipes {
		var listed []runJSON
		if err := json.Unmarshal([]byte(p.h.run(time.Minute, 0, "runs", "list", "--output", "json")), &listed); err != nil {
			t.Fatalf("%s runs list: %v", p.prefix, err)
		}
		var got []string
		for _, r := range listed {
			got = append(got, r.Run)
			if r.State != runEnded || r.Ended == nil || r.Ended.LastStep != e2eSteps-1 {
				t.Errorf("%s run %s: state %s, end %+v; want ended at step %d", p.prefix, r.Run, r.State, r.Ended, e2eSteps-1)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(p.runs) {
			t.Errorf("%s runs list: %v, want %v", p.prefix, got, p.runs)
		}
	}
	for _, p := range pipes {
		for _, s := range p.stages {
			s.terminate(30 * time.Second) // fails the test if the stage exited early (e.g. fenced)
		}
	}
	if s := pipes[0].stages[2].stderr.String(); strings.Contains(s, "fenced") || strings.Contains(s, "FENCED") {
		t.Errorf("the first pipeline's correct was fenced:\n%s", s)
	}
}

var tenancyStepRE = regexp.MustCompile(`(?m)^run (\S+) step (\d+) rows (\d+) `)

// checkTenancyTrain checks that a trainer printed each step of run once, in order, and said why it
// exited.
func checkTenancyTrain(t *testing.T, out, run string) {
	t.Helper()
	var got []string
	for _, m := range tenancyStepRE.FindAllStringSubmatch(out, -1) {
		if m[1] != run {
			t.Errorf("train --run %s printed a step of run %s", run, m[1])
		}
		got = append(got, m[2])
	}
	var want []string
	for s := 0; s < e2eSteps; s++ {
		want = append(want, strconv.Itoa(s))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("train --run %s printed steps %v, want %v:\n%s", run, got, want, out)
	}
	if !strings.Contains(out, "train exits") {
		t.Errorf("train --run %s did not say why it exited:\n%s", run, out)
	}
	if strings.Contains(out, "is shared with consumers of other runs") || strings.Contains(out, "not to this trainer") {
		t.Errorf("train --run %s with its default group warned of a shared group:\n%s", run, out)
	}
}
