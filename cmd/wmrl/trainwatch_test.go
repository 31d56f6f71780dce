package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// trainWatchRuns are two run ids whose records land on different partitions of a two-partition
// topic, so that in one group each trainer may hold the other's partition.
func trainWatchRuns(t *testing.T) (string, string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		a, b := fmt.Sprintf("watch-a%d", i), fmt.Sprintf("watch-b%d", i)
		if topics.PartitionFor(a, 2) != topics.PartitionFor(b, 2) {
			return a, b
		}
	}
	t.Fatal("no two run ids on different partitions")
	return "", ""
}

// TestTrainWatch: (1) two `wmrl train` of two runs in one explicit group both say, within
// seconds, that the group is shared with a consumer of the other run and which --group fixes it,
// and one that does not hold its run's partition names the partition and its holder; (2) a
// trainer of an ended run exits 0 after the run's last step, and a second one, whose group
// already acknowledged every step, exits 0 at once without a step.
func TestTrainWatch(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	names := topics.NewNames(prefix)
	runA, runB := trainWatchRuns(t)
	t.Cleanup(func() {
		e2eCleanup(t, brokers, redisURL, prefix, prefix, map[string]string{"shared": prefix + "shared", "a": prefix + "wmrl-trainer-" + runA})
	})
	h := &e2eHarness{t: t, bin: buildWMRL(t, t.TempDir()), global: []string{
		"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix,
	}}
	t.Cleanup(h.stopAll)
	h.run(time.Minute, 0, "topics", "create", "--partitions", "2")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(unique), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// The records are published once the group is stable: a member that held the other run's
	// partition during the first rebalances would read past (and commit past) records that are
	// not its run's, and the test would depend on that race.
	publish := func() {
		for _, run := range []string{runA, runB} {
			for step := int64(0); step < 2; step++ {
				recs, err := names.AdvantageRecords(run, "", step, cliRows(run, step), topics.DefaultChunkBytes)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					r.Partition = topics.PartitionFor(run, 2) // where correct puts them
				}
				if err := prod.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	// (1) One group, two runs.
	trA := h.start("train a", "train", "--run", runA, "--group", prefix+"shared")
	trB := h.start("train b", "train", "--run", runB, "--group", prefix+"shared")
	start := time.Now()
	want := map[*e2eProc]struct{ run, other string }{trA: {runA, runB}, trB: {runB, runA}}
	for tr, w := range want {
		msg := fmt.Sprintf("is shared with consumers of other runs: wmrl-trainer/%s", w.other)
		fix := fmt.Sprintf("--group %swmrl-trainer-%s", prefix, w.run)
		for !strings.Contains(tr.stderr.String(), msg) || !strings.Contains(tr.stderr.String(), fix) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("train --run %s in a shared group did not say %q and %q within 30 s:\n%s", w.run, msg, fix, tr.stderr.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("train --run %s named the shared group %v after start", w.run, time.Since(start).Round(time.Second))
	}
	publish()
	// Which trainer holds which partition is the group's choice: ask the group, then require of
	// each trainer its steps (it holds its run's partition) or the warning that names the
	// partition and its holder (it does not).
	held := groupAssignment(ctx, t, brokers, prefix+"shared", names.Advantages())
	t.Logf("group assignment %v; runs' partitions %s→%d, %s→%d", held, runA, topics.PartitionFor(runA, 2), runB, topics.PartitionFor(runB, 2))
	for tr, w := range want {
		p := topics.PartitionFor(w.run, 2)
		expect := "run " + w.run + " step 1 "
		if held["wmrl-trainer/"+w.run] != p {
			expect = fmt.Sprintf("records sit on partition %s/%d, which group %sshared gave to member wmrl-trainer/%s",
				names.Advantages(), p, prefix, w.other)
		}
		for !strings.Contains(tr.stderr.String(), expect) {
			if time.Since(start) > time.Minute {
				t.Fatalf("train --run %s (group assignment %v) did not print %q:\n%s", w.run, held, expect, tr.stderr.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, tr := range []*e2eProc{trA, trB} {
		tr.terminate(30 * time.Second)
	}
	if n, most := strings.Count(trA.stderr.String(), "is shared with consumers of other runs"), int(time.Since(start)/trainWarnEvery)+1; n > most {
		t.Errorf("the shared-group warning came %d times in %v; it is rate-limited to one per %v", n, time.Since(start), trainWarnEvery)
	}

	// (2) Run A ends at step 1 (as `wmrl correct` records it in Redis).
	ro, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	end := statestore.RunEnd{LastStep: 1, EndedAt: time.Now(), Reason: topics.EndReasonMarker}
	if err := statestore.New(rdb, tenantName(prefix, statestore.DefaultPrefix), 0).RecordEnd(ctx, runA, end); err != nil {
		t.Fatal(err)
	}
	out := h.run(time.Minute, 0, "train", "--run", runA)
	if !strings.Contains(out, "run "+runA+" step 0 ") || !strings.Contains(out, "run "+runA+" step 1 ") {
		t.Errorf("train of the ended run printed %q, want steps 0 and 1", out)
	}
	began := time.Now()
	stdout, stderr, code := h.try(time.Minute, "train", "--run", runA)
	if code != 0 || strings.Contains(stdout, "step") || !strings.Contains(stderr, "no step of it is left for this group: train exits") {
		t.Errorf("train of an ended, acknowledged run: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	t.Logf("train of an ended run whose steps were all acknowledged exited after %v", time.Since(began).Round(100*time.Millisecond))
}

// groupAssignment waits for group to be stable with two members and returns the one partition of
// topic each member holds, by client id.
func groupAssignment(ctx context.Context, t *testing.T, brokers []string, group, topic string) map[string]int32 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatalf("describe %s: %v", group, err)
		}
		g := described[group]
		held := map[string]int32{}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range a.Topics {
					if tp.Topic == topic && len(tp.Partitions) == 1 {
						held[m.ClientID] = tp.Partitions[0]
					}
				}
			}
		}
		if g.State == "Stable" && len(held) == 2 {
			return held
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s not stable with two members holding one partition each: %s %v", group, g.State, held)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
