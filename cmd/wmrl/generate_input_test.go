package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// TestGenerateBadLineShortensNoGroup runs `wmrl generate` on the real broker with a typo in one
// line of step 1. Before, the line was dead-lettered with a warning, its group published with
// the other rollouts only, the run ended and the exit status was 0. Now the default stops with
// exit 2 naming the line and the field, nothing of step 1 is published and the run is not ended;
// --skip-invalid dead-letters the line, leaves its whole group out and does not end the run.
func TestGenerateBadLineShortensNoGroup(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, map[string]string{}) })
	dir := t.TempDir()
	h := &e2eHarness{t: t, bin: buildWMRL(t, dir), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")

	input := filepath.Join(dir, "typo.jsonl")
	lines := []string{
		`{"step": 0, "group_id": "q1", "artifact": "a"}`,
		`{"step": 0, "group_id": "q1", "artifact": "b"}`,
		`{"step": 1, "group_id": "q1", "artifact": "a"}`,
		`{"step": 1, "group_id": "q1", "artifcat": "b"}`, // line 4: the typo
		`{"step": 1, "group_id": "q2", "artifact": "a"}`,
	}
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := h.try(time.Minute, "generate", "--backend", "jsonl", "--input", input, "--run", "strict")
	if code != 2 || !strings.Contains(errOut, "line 4") || !strings.Contains(errOut, `"artifcat"`) || strings.Contains(out, "ended") {
		t.Errorf("generate with a typo: exit %d\nstdout %q\nstderr %q\nwant exit 2 naming line 4 and the field, no end", code, out, errOut)
	}
	out, errOut, code = h.try(time.Minute, "generate", "--backend", "jsonl", "--input", input, "--run", "lenient", "--skip-invalid")
	if code != 0 || strings.Contains(out, "ended") || !strings.Contains(errOut, "the run is not ended") || !strings.Contains(errOut, "step 1 group 1-q1") {
		t.Errorf("generate --skip-invalid: exit %d\nstdout %q\nstderr %q\nwant exit 0, group 1-q1 named, no end", code, out, errOut)
	}

	groups := map[string]map[string]int{} // run → group → rollouts
	for _, r := range readTopic(t, brokers, names.Rollouts()) {
		ro, err := topics.DecodeRollout(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if groups[ro.RunID] == nil {
			groups[ro.RunID] = map[string]int{}
		}
		groups[ro.RunID][ro.GroupID]++
	}
	if got := groups["strict"]; len(got) != 1 || got["0-q1"] != 2 {
		t.Errorf("run strict published groups %v, want step 0's 0-q1 (2 rollouts) alone", got)
	}
	if got := groups["lenient"]; len(got) != 2 || got["0-q1"] != 2 || got["1-q2"] != 1 {
		t.Errorf("run lenient published groups %v, want 0-q1 (2) and 1-q2 (1), not 1-q1", got)
	}
	if ends := readTopic(t, brokers, names.Runs()); len(ends) != 0 {
		t.Errorf("%d end-of-run requests, want none", len(ends))
	}
	var badInput int
	for _, r := range readTopic(t, brokers, names.DLQ()) {
		if d, err := topics.ParseDeadLetter(r); err == nil && d.Reason == "bad-input" && d.SourceOffset == 4 {
			badInput++
		}
	}
	if badInput != 1 {
		t.Errorf("%d bad-input dead letters of line 4, want 1 (from --skip-invalid)", badInput)
	}
}

// readTopic reads every record of topic up to its end offsets at the call; for topics written
// without transactions (a commit marker as the last offset would never be read).
func readTopic(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d records, partitions not at their end: %v", topic, len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}
