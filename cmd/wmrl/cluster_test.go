package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/testenv/secure"
	"github.com/wmrl/wmrl/topics"
)

// EnvTestCluster turns on TestClusterFailover (make test-cluster): it starts three brokers and
// waits out two failovers, which is more than every `go test ./...` should pay.
const EnvTestCluster = "WMRL_TEST_CLUSTER"

// The failover workload: long enough that both kills land while rollouts are still arriving,
// few enough anchor pairs (< MinPairs) that calibration stays the identity and checkAdvantages
// can predict every row.
const (
	clusterSteps     = 30
	clusterGroups    = 3
	clusterRollouts  = 4
	clusterAnchor    = 0.25
	clusterStepPause = 250 * time.Millisecond
)

// localCluster is a deploy/local/cluster.sh cluster in a temporary directory.
type localCluster struct {
	*testenv.KafkaCluster
	t *testing.T
}

func startLocalCluster(t *testing.T) *localCluster {
	t.Helper()
	return &localCluster{KafkaCluster: testenv.StartKafkaCluster(t), t: t}
}

// leader returns the leader of topic's partition p.
func (c *localCluster) leader(ctx context.Context, topic string, p int32) int32 {
	c.t.Helper()
	md, err := c.Admin.Metadata(ctx, topic)
	if err != nil {
		c.t.Fatalf("metadata: %v", err)
	}
	pd, ok := md.Topics[topic].Partitions[p]
	if !ok || pd.Err != nil {
		c.t.Fatalf("partition %s/%d: %v", topic, p, pd.Err)
	}
	return pd.Leader
}

// activeController asks the KRaft quorum for its leader: in KRaft the metadata response names a
// random broker as "controller", not the active one.
func (c *localCluster) activeController(ctx context.Context) int32 {
	c.t.Helper()
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Client)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		c.t.Fatalf("describe quorum: %v", err)
	}
	return resp.Topics[0].Partitions[0].LeaderID
}

// waitFullISR waits until every partition of the topics has all three replicas in sync again.
func (c *localCluster) waitFullISR(ctx context.Context, names ...string) {
	c.t.Helper()
	start := time.Now()
	if err := c.WaitFullISR(ctx, names...); err != nil {
		c.t.Fatalf("ISR not full again: %v", err)
	}
	c.t.Logf("all replicas in sync %v after the restart", time.Since(start).Round(time.Millisecond))
}

// TestClusterFailover runs the pipeline against three brokers (RF 3, min.insync.replicas 2)
// while rollouts stream in, SIGKILLs the leader of the run's partition, restarts it, then
// SIGKILLs the active controller: every stage keeps running without a restart, every rollout
// has exactly one predicted/executed record and one advantage row, and a replay from the
// topics reproduces the live digest.
func TestClusterFailover(t *testing.T) {
	if os.Getenv(EnvTestCluster) == "" {
		t.Skipf("starts a 3-broker cluster and kills two of its nodes; set %s=1 (make test-cluster)", EnvTestCluster)
	}
	dir := t.TempDir()
	built := make(chan string, 1)
	go func() { built <- buildWMRLQuiet(dir) }()
	c := startLocalCluster(t)
	rds := secure.StartRedis(t, secure.NewCerts(t, t.TempDir(), "unused"))
	bin := <-built
	if !strings.HasPrefix(bin, "/") {
		t.Fatal(bin)
	}
	prefix := "wmrl.cluster."
	names := topics.NewNames(prefix)
	h := &e2eHarness{t: t, bin: bin, global: []string{"--brokers", strings.Join(c.Seeds, ","), "--topic-prefix", prefix},
		env: []string{"WMRL_REDIS=" + rds.URL()}}
	t.Cleanup(h.stopAll)

	h.run(time.Minute, 0, "topics", "create", "--partitions", "3", "--replication-factor", "3")
	// A just-created topic reaches every broker's metadata cache a moment later.
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, errOut, code := h.try(time.Minute, "topics", "check", "--partitions", "3", "--replication-factor", "3")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics check: exit %d\n%s%s", code, out, errOut)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfgs, err := c.Admin.DescribeTopicConfigs(ctx, names.Rollouts(), names.Advantages())
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range cfgs {
		got := "(absent)"
		for _, cf := range rc.Configs {
			if cf.Key == "min.insync.replicas" {
				got = cf.MaybeValue()
			}
		}
		if got != "2" {
			t.Errorf("%s min.insync.replicas = %s, want 2 (%v)", rc.Name, got, rc.Err)
		}
	}

	rollouts := clusterWorkload(t)
	wm := startE2EWorldModel(t)
	argv := e2eScoreArgv(t)
	procs := []*e2eProc{
		h.start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", wm+"/v1", "--model", "m",
			"--concurrency", "4", "--group", prefix+"worldmodel", "--metrics-addr", "127.0.0.1:0"),
		h.start("sandbox", "sandbox", "--single-step-no-private", "--argv", argv, "--slots", "2", "--timeout", "20s",
			"--group", prefix+"sandbox", "--metrics-addr", "127.0.0.1:0"),
		h.start("correct", "correct", "--transactional-id", prefix+"correct-0", "--group", prefix+"correct",
			"--redis-prefix", "cluster", "--metrics-addr", "127.0.0.1:0"),
	}

	// The generator reads its rollouts from a pipe the test fills step by step.
	gen := h.command(context.Background(), "generate", "--backend", "jsonl", "--input", "-",
		"--run", e2eRun, "--anchor-fraction", strconv.FormatFloat(clusterAnchor, 'g', -1, 64))
	stdin, err := gen.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	genOut := &testenv.SyncBuffer{}
	gen.Stdout, gen.Stderr = genOut, genOut
	if err := gen.Start(); err != nil {
		t.Fatal(err)
	}
	genDone := make(chan error, 1)
	go func() { genDone <- gen.Wait() }()
	byStep := map[int64][]e2eRollout{}
	for _, r := range rollouts {
		byStep[r.step] = append(byStep[r.step], r)
	}
	next := int64(0)
	feed := func(until int64) {
		for ; next < until; next++ {
			for _, r := range byStep[next] {
				if _, err := stdin.Write(e2eLine(t, r)); err != nil {
					t.Fatalf("generator stdin: %v\n%s", err, genOut.String())
				}
			}
			time.Sleep(clusterStepPause)
		}
	}

	feed(8)
	// The run's records all go to one partition (they are keyed by the run id).
	busy := c.busyPartition(ctx, names.Rollouts())
	victim := c.leader(ctx, names.Rollouts(), busy)
	t.Logf("killing node %d, leader of %s/%d", victim, names.Rollouts(), busy)
	c.Run("kill-node", strconv.Itoa(int(victim)))
	killed := time.Now()
	feed(16)
	// The controller moves leadership once the dead broker's session times out
	// (broker.session.timeout.ms, 9 s by default).
	for l := c.leader(ctx, names.Rollouts(), busy); l == victim; l = c.leader(ctx, names.Rollouts(), busy) {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("node %d still leads %s/%d 30 s after its death", victim, names.Rollouts(), busy)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s/%d has a new leader %v after the kill", names.Rollouts(), busy, time.Since(killed).Round(100*time.Millisecond))
	c.Run("start-node", strconv.Itoa(int(victim)))
	c.waitFullISR(ctx, names.Rollouts(), names.Predicted(), names.Executed(), names.Steps(), names.Advantages(), names.Calibration())
	feed(20)
	ctrl := c.activeController(ctx)
	t.Logf("killing node %d, the active controller", ctrl)
	c.Run("kill-node", strconv.Itoa(int(ctrl)))
	feed(26)
	if now := c.activeController(ctx); now == ctrl {
		t.Errorf("node %d is still the active controller after its death", ctrl)
	} else {
		t.Logf("node %d took over as active controller", now)
	}
	feed(clusterSteps)
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-genDone:
		if err != nil {
			t.Fatalf("generate: %v\n%s", err, genOut.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("generate did not finish\n%s", genOut.String())
	}
	t.Logf("generate: %s", lastLine(genOut.String()))
	c.Run("start-node", strconv.Itoa(int(ctrl)))

	live := h.pollDigestRun(e2eRun, clusterSteps, 3*time.Minute)
	t.Logf("live: %s", live)
	for _, p := range procs {
		p.terminate(30 * time.Second) // fails if the stage had exited
	}

	opts := []kgo.Opt{kgo.SeedBrokers(c.Seeds...)}
	// worldmodel and sandbox are at-least-once: when a node that coordinates their group dies,
	// franz-go drops the group session and the work since the last commit is redone. The
	// redelivered records must be the same verdict; the correction consumer (exactly-once) keeps
	// one, which the advantage checks below prove.
	checkPredicted(t, redelivered(t, "predicted", readCommittedRecords(ctx, t, opts, names.Predicted()), func(r *kgo.Record) (string, string, error) {
		p, err := topics.DecodePredictedRecord(r)
		return p.RolloutID, fmt.Sprint(p.Status, p.Reason, scoreText(p.Score)), err
	}), rollouts)
	checkExecuted(t, redelivered(t, "executed", readCommittedRecords(ctx, t, opts, names.Executed()), func(r *kgo.Record) (string, string, error) {
		e, err := topics.DecodeExecutedRecord(r)
		return e.RolloutID, fmt.Sprint(e.Status, e.Reason, scoreText(e.Score)), err
	}), rollouts)
	rows := checkAdvantageTopic(ctx, t, opts, names.Advantages(), rollouts, live, clusterSteps) // exactly one row per rollout: 0 lost, 0 duplicated
	rout := h.run(2*time.Minute, 0, "replay", "--run", e2eRun, "--out", filepath.Join(dir, "replay.bin"),
		"--redis-prefix", "cluster-replay", "--state-prefix", "cluster")
	if !strings.Contains(rout, "digest="+topics.DigestRows(rows)) || !strings.Contains(rout, "incomplete_steps=0") {
		t.Errorf("replay printed %q, want digest=%s and no incomplete steps", rout, topics.DigestRows(rows))
	}
}

// busyPartition is the partition of topic that has records.
func (c *localCluster) busyPartition(ctx context.Context, topic string) int32 {
	c.t.Helper()
	for {
		ends, err := c.Admin.ListEndOffsets(ctx, topic)
		if err != nil {
			c.t.Fatalf("end offsets: %v", err)
		}
		busy := int32(-1)
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				busy = o.Partition
			}
		})
		if busy >= 0 {
			return busy
		}
		if ctx.Err() != nil {
			c.t.Fatal("no records in", topic)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterWorkload is e2eWorkload's layout over clusterSteps steps, without failure cases.
func clusterWorkload(t *testing.T) []e2eRollout {
	t.Helper()
	var out []e2eRollout
	k := 0
	for s := int64(0); s < clusterSteps; s++ {
		for j := range clusterGroups {
			gid := fmt.Sprintf("%d-g%d", s, j)
			anchor := topics.IsAnchor(e2eRun, gid, clusterAnchor)
			for i := range clusterRollouts {
				out = append(out, e2eRollout{
					id: fmt.Sprintf("%s-%d", gid, i), group: gid, step: s, anchor: anchor,
					wm:   fmt.Sprintf("%.2f", float64((k*7)%19)/20),
					exec: fmt.Sprintf("%.2f", float64((k*11+3)%17)/20),
				})
				k++
			}
		}
	}
	return out
}

// redelivered returns values with records of an already seen rollout removed, after checking
// that each repeats the first record's verdict; it logs how many there were.
func redelivered(t *testing.T, what string, values []*kgo.Record, key func(*kgo.Record) (id, verdict string, err error)) []*kgo.Record {
	t.Helper()
	first := map[string]string{}
	var out []*kgo.Record
	dups := 0
	for _, v := range values {
		id, verdict, err := key(v)
		if err != nil {
			t.Fatalf("%s record: %v", what, err)
		}
		if prev, ok := first[id]; ok {
			dups++
			if prev != verdict {
				t.Errorf("rollout %s: redelivered %s record says %q, the first said %q", id, what, verdict, prev)
			}
			continue
		}
		first[id] = verdict
		out = append(out, v)
	}
	t.Logf("%s: %d records, %d of them redeliveries of an earlier verdict", what, len(values), dups)
	return out
}

func scoreText(s *float64) string {
	if s == nil {
		return "none"
	}
	return strconv.FormatFloat(*s, 'g', -1, 64)
}
