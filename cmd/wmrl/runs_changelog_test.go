package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// After Redis lost its data, `runs list` still lists the runs the calibration changelog holds,
// on the real broker and Redis: an active run from its latest snapshot per stream, an ended
// (idle) run with its end, each marked as read from the changelog; a run Redis holds is listed
// from Redis as before, and a run whose changelog keys were tombstoned is not listed.
func TestRunsListFromChangelog(t *testing.T) {
	brokers := testenv.Kafka(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	redisURL, rdb := runsRedis(t, unique)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{}) })
	global := []string{"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}
	if code, _, errOut := runCLIOut(append(global, "topics", "create", "--partitions", "2")...); code != 0 {
		t.Fatalf("topics create: %s", errOut)
	}
	names := topics.NewNames(prefix)
	var recs []*kgo.Record
	snap := func(run, stream string, step int64, fit uint64) {
		r, err := names.CalibrationRecord(topics.CalibrationSnapshot{RunID: run, Stream: stream, Step: step, Digest: "d", FitVersion: fit, AnchorWeight: 1.5, Pairs: 12})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	for v := range int64(4) {
		snap("lost-active", "main", v, uint64(v/2))
		snap("lost-active", "side", v/2, 0)
	}
	snap("lost-ended", "main", 2, 1)
	end, err := names.CalibrationEndRecord(topics.CalibrationEnd{RunID: "lost-ended", LastStep: 2, EndedAt: runsTestClock.Add(-time.Hour), Reason: topics.EndReasonIdle})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, end)
	snap("retired", "main", 5, 0)
	recs = append(recs, names.CalibrationTombstone(topics.CalibrationKey("retired", "main")))
	snap("kept", "main", 0, 0)
	for _, r := range recs {
		r.Partition = topics.PartitionFor(strings.SplitN(string(r.Key), "/", 2)[0], 2)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Redis holds "kept" only (it lost the others).
	writeSealed(t, statestore.New(rdb, unique, 0), sealedRun(t, "kept", "main", 3), "kept")

	defer func(c func() time.Time) { runsClock = c }(runsClock)
	runsClock = func() time.Time { return runsTestClock }
	code, out, errOut := runCLIOut(append(global, "runs", "list", "--redis-prefix", unique)...)
	if code != 0 || errOut != "" {
		t.Fatalf("runs list: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`(?m)^kept\s+active\s+2\s+main\s`,
		`(?m)^lost-active\s+active\*\s+3\s+main,side\s+0 B\s+1\.5,1\.5\s+1,0\s+-$`,
		`(?m)^lost-ended\s+ended\*\s+2\s+main\s+0 B\s+1\.5\s+1\s+\S+ after step 2 \(idle, 1h0m0s ago\)$`,
		`(?m)^\* Redis holds nothing of the run: read from the calibration changelog`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("runs list output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "retired") {
		t.Errorf("a run whose changelog keys were tombstoned is listed:\n%s", out)
	}

	code, out, errOut = runCLIOut(append(global, "runs", "list", "--redis-prefix", unique, "--output", "json")...)
	if code != 0 {
		t.Fatalf("runs list --output json: exit %d: %s", code, errOut)
	}
	var runs []runJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range runs {
		got[r.Run] = r.State + "/" + r.Source
	}
	if want := map[string]string{"kept": "active/redis", "lost-active": "active/changelog", "lost-ended": "ended/changelog"}; len(got) != len(want) ||
		got["kept"] != want["kept"] || got["lost-active"] != want["lost-active"] || got["lost-ended"] != want["lost-ended"] {
		t.Fatalf("runs %v, want %v", got, want)
	}

	// Without the changelog: Redis's runs only, as before.
	code, out, _ = runCLIOut(append(global, "runs", "list", "--redis-prefix", unique, "--changelog=false")...)
	if code != 0 || strings.Contains(out, "lost-") || !strings.Contains(out, "kept") {
		t.Fatalf("runs list --changelog=false: exit %d:\n%s", code, out)
	}
}
