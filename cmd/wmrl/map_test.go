package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// TestCorrectZSpaceOnBroker runs `wmrl correct --map zspace` on the real broker and Redis
// against a synthesized run, and checks that the z-space map reached the advantages (the
// calibration snapshots carry a non-zero debias shift, the gauge is exported), that
// `wmrl replay --map zspace` reproduces the live digest, that a replay under another map is refused
// (and, with --allow-config-change, does not reproduce it and warns that it will not), and that restarting the consumer with another map is refused.
func TestCorrectZSpaceOnBroker(t *testing.T) {
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

	const steps, minPairs = 12, "48"
	wl := workload.Config{Runs: 1, Steps: steps, Groups: 4, GroupSize: 8, AnchorEvery: 2, Streams: 1, Seed: 17, RunPrefix: "zs"}
	synth, err := workload.Synthesize(names, wl)
	if err != nil {
		t.Fatal(err)
	}
	run := synth[0].Run
	var recs []*kgo.Record
	for _, s := range synth {
		recs = append(recs, s.Records()...)
	}
	testenv.Produce(t, brokers, recs)

	mapFlags := []string{"--map", "zspace", "--min-pairs", minPairs}
	corr := h.start("correct", append([]string{"correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique + "-txn",
		"--group", group, "--redis-prefix", unique}, mapFlags...)...)
	live := h.pollDigestRun(run, steps, 90*time.Second)
	liveDigest := strings.Fields(live)[1]

	// The gauge of the last step, and a shift in the snapshots once φ is fitted.
	body := getMetrics(t, corr.metricsAddr())
	shiftRE := regexp.MustCompile(`(?m)^wmrl_correct_debias_advantage_shift\{run="` + run + `",stream="stream0"\} (\S+)$`)
	if shiftRE.FindStringSubmatch(body) == nil {
		t.Errorf("/metrics has no wmrl_correct_debias_advantage_shift for %s:\n%s", run, body)
	}
	corr.terminate(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moved := 0
	for _, v := range readCommitted(ctx, t, []kgo.Opt{kgo.SeedBrokers(brokers...)}, names.Calibration()) {
		if bytes.HasPrefix(v, []byte("WMRLCCK")) {
			continue // a window chunk, not a snapshot
		}
		sn, err := topics.DecodeCalibration(v)
		if err != nil {
			t.Fatalf("calibration snapshot: %v", err)
		}
		if sn.Debias == nil {
			t.Fatalf("snapshot of step %d has no debias effect", sn.Step)
		}
		if sn.BreakX != nil {
			t.Errorf("snapshot of step %d publishes z-space breakpoints as a score map", sn.Step)
		}
		if sn.FitVersion > 0 && sn.Debias.MeanShift > 0 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no snapshot shows the z-space map moving an advantage")
	}

	// replay returns the replay's digest and whether it warned that its settings are not the live
	// consumer's.
	replay := func(name string, flags ...string) (string, bool) {
		out, errOut, code := h.try(2*time.Minute, append([]string{"replay", "--run", run, "--out", filepath.Join(dir, name),
			"--redis-prefix", unique + "-" + name}, flags...)...)
		m := regexp.MustCompile(`digest=([0-9a-f]{64})`).FindStringSubmatch(out)
		if code != 0 || m == nil || !strings.Contains(out, "incomplete_steps=0") {
			t.Fatalf("replay exit %d printed %q\n%s", code, out, errOut)
		}
		return m[1], strings.Contains(errOut, "replaying with other settings") && strings.Contains(errOut, "--map (map): live zspace, replay isotonic")
	}
	if got, warned := replay("zspace.bin", mapFlags...); got != liveDigest || warned {
		t.Errorf("replay --map zspace: digest %s (live %s), config warning %v", got, liveDigest, warned)
	}
	// Under another map the replay is refused unless asked for, and then warned about.
	if _, errOut, code := h.try(2*time.Minute, "replay", "--run", run, "--out", filepath.Join(dir, "refused.bin"),
		"--no-redis", "--min-pairs", minPairs); code != 2 || !strings.Contains(errOut, "--map (map): live zspace, replay isotonic") {
		t.Errorf("replay with the isotonic map: exit %d, want 2 naming --map\n%s", code, errOut)
	}
	if got, warned := replay("isotonic.bin", "--min-pairs", minPairs, "--allow-config-change"); got == liveDigest || !warned {
		t.Errorf("replay with the isotonic map: digest %s (the live z-space digest: %v), settings warning %v", got, got == liveDigest, warned)
	}

	// The map is part of the correction config: the consumer refuses to resume the run's
	// states under another one.
	_, errOut, code := h.try(time.Minute, "correct", "--transactional-id", unique+"-txn", "--group", group,
		"--redis-prefix", unique, "--map", "centred", "--min-pairs", minPairs)
	t.Logf("correct --map centred: exit %d: %s", code, lastLine(errOut))
	if code == 0 || !strings.Contains(errOut, "config") {
		t.Errorf("correct --map centred on z-space states: exit %d\n%s", code, errOut)
	}
}

func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func TestMapFlag(t *testing.T) {
	tests := []struct {
		args     []string
		wantErr  error
		wantMap  correction.MapKind
		wantBins int
		wantMin  int
	}{
		{nil, nil, correction.MapIsotonic, 10, 200},
		{[]string{"--map", "centred"}, nil, correction.MapCentred, 10, 200},
		{[]string{"--map", "zspace"}, nil, correction.MapZSpace, 12, 400},
		{[]string{"--map", "ZSpace", "--min-pairs", "50"}, nil, correction.MapZSpace, 12, 50},
		{[]string{"--map", "binned"}, correction.ErrUnknownMap, 0, 0, 0},
		{[]string{"--mode", "reference", "--map", "zspace"}, correction.ErrInvalidConfig, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := pflag.NewFlagSet("t", pflag.ContinueOnError)
			get := correctionFlags(f)
			if err := f.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c, err := get()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err == nil && (c.Map != tc.wantMap || c.Bins != tc.wantBins || c.MinPairs != tc.wantMin) {
				t.Fatalf("map %v bins %d min pairs %d", c.Map, c.Bins, c.MinPairs)
			}
		})
	}
}
