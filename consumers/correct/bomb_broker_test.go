package correct

import (
	"syscall"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// rssBoundMB is the peak RSS docs/stages.md states for `wmrl correct` under hostile input
// (never-completing manifests, floods of runs, decompression bombs) with the default limits.
const rssBoundMB = 256

// stopChild ends a consumer subprocess with SIGTERM (it commits, leaves the group and exits 0).
func stopChild(t *testing.T, c *child) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := c.wait(45 * time.Second); !ok || err != nil {
		t.Fatalf("consumer did not stop cleanly: exited=%v err=%v", ok, err)
	}
}

// batchDeadLetters parses the DLQ's dead letters with reason batch-too-large.
func batchDeadLetters(t *testing.T, seeds []string, names topics.Names) []topics.DeadLetter {
	t.Helper()
	var out []topics.DeadLetter
	for _, r := range readTopic(t, seeds, names.DLQ()) {
		d, err := topics.ParseDeadLetter(r)
		if err != nil {
			t.Fatalf("dead letter at offset %d: %v", r.Offset, err)
		}
		if d.Reason == topics.ReasonBatchTooLarge {
			out = append(out, d)
		}
	}
	return out
}

// On the real broker, with `correct` as a subprocess: a decompression bomb (one zstd batch of a
// few hundred KB that inflates past 256 MiB) sits on the run's partition of each input topic
// (steps, predicted, executed) before the run's valid records. The consumer skips each bomb
// unread, dead-letters it by reference (batch-too-large, with its exact offset range) in the
// transaction that commits past it, corrects every valid record exactly once, and its peak RSS
// stays under the documented bound (the whole bomb would not fit in it). A restarted consumer
// does not meet the bombs again (its committed offsets are past them; new records are
// corrected, nothing is skipped or dead-lettered twice), and a replay of the run skips the same
// batches and gives the live digest.
func TestConsumerSkipsBombsOnBroker(t *testing.T) {
	seeds := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	prefix := testenv.Name(t) + "."
	names := topics.NewNames(prefix)
	brokerTopics(t, seeds, names)
	cc := smallCorrection()

	wl := SynthConfig{Runs: 2, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 1, Seed: 41, RunPrefix: "b"}
	good := flatten(synthOn(t, names, wl))
	run := "b-0"
	part := topics.PartitionFor(run, 3)
	const bombBytes = 300 << 20 // over the bound below, so reading one whole would fail the test
	var bombs []testenv.BombRef
	start := time.Now()
	for _, topic := range inputTopics(names) {
		bombs = append(bombs, testenv.Bomb(t, seeds, topic, part, bombBytes))
	}
	t.Logf("3 bombs written in %v", time.Since(start).Round(time.Millisecond))
	testenv.Produce(t, seeds, good)

	ch := func() childConfig {
		return childConfig{Seeds: seeds, RedisURL: redisURL, Prefix: prefix, Group: prefix + "g", TxnID: prefix + "tx",
			RedisPrefix: prefix + "state", MinPairs: cc.MinPairs, MetricsAddr: testenv.FreeAddr(t)}
	}
	skippedSeries := `wmrl_stage_batches_skipped_total{reason="batch-too-large",stage="correct"}`
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)

	first := ch()
	c1 := startChild(t, first, "correct-1.log")
	total := rollouts(wl)
	rd.readUntil(t, total, 90*time.Second)
	peak := float64(testenv.PeakRSS(t, c1.cmd.Process.Pid)) / (1 << 20)
	if n := scrape(t, first.MetricsAddr, skippedSeries); n != 3 {
		t.Errorf("batches skipped %v, want the 3 bombs", n)
	}
	stopChild(t, c1)
	t.Logf("peak RSS of correct with 3 bombs of %d MiB each: %.0f MiB (bound %d MiB)", bombBytes>>20, peak, rssBoundMB)
	if peak > rssBoundMB && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("peak RSS %.0f MiB over the documented bound of %d MiB", peak, rssBoundMB)
	}

	checkDLs := func(when string) {
		t.Helper()
		dls := batchDeadLetters(t, seeds, names)
		if len(dls) != len(bombs) {
			t.Fatalf("%s: %d batch-too-large dead letters, want %d (one per bomb, exactly once)", when, len(dls), len(bombs))
		}
		for _, b := range bombs {
			found := false
			for _, d := range dls {
				if d.SourceTopic == b.Topic && d.SourcePartition == b.Partition && d.SourceOffset == b.BaseOffset &&
					d.SourceEndOffset == b.NextOffset && d.Stage == "correct" && d.LimitBytes == DefaultMaxBatchBytes && d.Value == nil {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no dead letter referencing %s/%d [%d, %d) in %+v", when, b.Topic, b.Partition, b.BaseOffset, b.NextOffset, dls)
			}
		}
	}
	checkDLs("first run")

	// The restart: new runs' records arrive after the bombs; nothing is skipped again.
	wl2 := wl
	wl2.RunPrefix, wl2.Seed = "c", 42
	more := flatten(synthOn(t, names, wl2))
	second := ch()
	c2 := startChild(t, second, "correct-2.log")
	testenv.Produce(t, seeds, more)
	rd.readUntil(t, total+rollouts(wl2), 90*time.Second)
	if n := scrape(t, second.MetricsAddr, skippedSeries); n != 0 {
		t.Errorf("the restarted consumer skipped %v batches, want 0 (its offsets are past the bombs)", n)
	}
	stopChild(t, c2)
	rd.readUntil(t, total+rollouts(wl2)+1, 1500*time.Millisecond)
	checkExactlyOnce(t, rd.rows, total+rollouts(wl2))
	want := topics.DigestRows(referenceRows(t, cc, retopic(append(good, more...), names)))
	if got := topics.DigestRows(rd.rows); got != want {
		t.Fatalf("live digest %s, want %s (the valid records alone)", got, want)
	}
	checkDLs("after the restart")

	res := replayRun(t, seeds, names, run, cc)
	if live := topics.DigestRows(rowsOfRun(rd.rows, run)); res.Digest != live || res.SkippedBatches != len(bombs) {
		t.Fatalf("replay of %s: digest %s, %d batches skipped; want the live digest %s and %d", run, res.Digest, res.SkippedBatches, live, len(bombs))
	}
}
