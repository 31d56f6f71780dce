package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// TestReplaySettingsOnBroker runs `wmrl correct` with a staleness bound and per-run limits other
// than the defaults on the real broker and Redis, then replays the run: with the same settings the
// replay's digest is the live one; with another --max-staleness or per-run limit the replay exits
// 2 naming each differing setting and its flag, and --allow-config-change replays anyway with a
// warning.
func TestReplaySettingsOnBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	group := unique + "-correct"
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{"correct": group}) })

	dir := t.TempDir()
	h := &e2eHarness{t: t, bin: buildWMRL(t, dir), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix,
	}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "2")

	const steps = 6
	synth, err := workload.Synthesize(names, workload.Config{Runs: 1, Steps: steps, Groups: 3, GroupSize: 4, AnchorEvery: 2, Streams: 1, Seed: 5, RunPrefix: "rs"})
	if err != nil {
		t.Fatal(err)
	}
	run := synth[0].Run
	var recs []*kgo.Record
	for _, s := range synth {
		recs = append(recs, s.Records()...)
	}
	testenv.Produce(t, brokers, recs)

	live := []string{"--max-staleness", "2", "--max-step-rows", "5000", "--max-pending-steps-per-run", "300", "--trust-gate"}
	corr := h.start("correct", append([]string{"correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique + "-txn",
		"--group", group, "--redis-prefix", unique}, live...)...)
	liveDigest := strings.Fields(h.pollDigestRun(run, steps, 90*time.Second))[1]
	corr.terminate(30 * time.Second)

	digestRE := regexp.MustCompile(`digest=([0-9a-f]{64})`)
	replay := func(name string, flags ...string) (digest, stderr string, code int) {
		out, errOut, code := h.try(2*time.Minute, append([]string{"replay", "--run", run, "--out", filepath.Join(dir, name),
			"--redis-prefix", unique + "-" + name}, flags...)...)
		if m := digestRE.FindStringSubmatch(out); m != nil {
			digest = m[1]
		}
		return digest, errOut, code
	}

	if got, errOut, code := replay("same.bin", live...); code != 0 || got != liveDigest {
		t.Errorf("replay with the live settings: exit %d, digest %s (live %s)\n%s", code, got, liveDigest, errOut)
	}
	tests := []struct {
		name  string
		flags []string
		want  []string // flags the refusal must name
	}{
		{"staleness", []string{"--max-staleness", "3", "--max-step-rows", "5000", "--max-pending-steps-per-run", "300", "--trust-gate"}, []string{"--max-staleness (max-staleness): live 2, replay 3"}},
		{"step-rows", []string{"--max-staleness", "2", "--max-step-rows", "4000", "--max-pending-steps-per-run", "300", "--trust-gate"}, []string{"--max-step-rows (max-step-rows): live 5000, replay 4000"}},
		{"trust-gate", live[:len(live)-1], []string{"--trust-gate (trust-gate): live true, replay (not recorded)"}},
		{"defaults", nil, []string{"--max-staleness", "--max-step-rows", "--max-pending-steps-per-run"}},
		{"map", append([]string{"--map", "centred"}, live...), []string{"--map (map): live isotonic, replay centred"}},
	}
	for _, tc := range tests {
		got, errOut, code := replay(tc.name+".bin", tc.flags...)
		if code != 2 || got != "" || !strings.Contains(errOut, "replay settings differ from the live consumer's") {
			t.Errorf("replay %s: exit %d, digest %q; want exit 2 and a refusal\n%s", tc.name, code, got, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("replay %s: the refusal does not name %q:\n%s", tc.name, w, errOut)
			}
		}
		if tc.name == "staleness" {
			t.Logf("refusal: %s", lastLine(errOut))
		}
	}

	got, errOut, code := replay("allowed.bin", "--allow-config-change")
	if code != 0 || got == "" || !strings.Contains(errOut, "replaying with other settings than the live consumer's") || !strings.Contains(errOut, "--max-staleness") {
		t.Errorf("replay --allow-config-change: exit %d, digest %q; want exit 0 with a warning naming the settings\n%s", code, got, errOut)
	}
}
