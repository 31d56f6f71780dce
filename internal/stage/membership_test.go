package stage

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

func nopHandler(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }

// waitFor polls cond every 50ms until it holds or d passes, and reports how long it took.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// TestReadyzFollowsCluster: ready once partitions are assigned, not ready while the cluster
// stops answering, ready again when it answers.
func TestReadyzFollowsCluster(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	addr := c.ListenAddrs()[0]
	_, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	st, err := New(Config{Name: "ready", Topics: []string{"in"}, Names: topics.NewNames("t."),
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(addr)}}, nopHandler)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready() == nil {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	waitFor(t, 20*time.Second, "ready after start", func() bool { return st.Ready() == nil })
	c.Close() // the broker goes away
	waitFor(t, 10*time.Second, "not ready during the outage", func() bool {
		err := st.Ready()
		return err != nil && strings.Contains(err.Error(), "kafka unreachable")
	})
	c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 30*time.Second, "ready after the outage", func() bool { return st.Ready() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st.Ready() == nil {
		t.Fatal("ready after Run returned")
	}
}

// TestStaticMembership runs on the real broker: a static member that crashes and restarts gets
// its partitions back well before the session timeout; a second live instance with the same id
// fences the first, which exits naming --instance-id; a graceful stop leaves the group.
func TestStaticMembership(t *testing.T) {
	brokers := testenv.Kafka(t)
	prefix := testenv.Name(t) + "."
	in := testenv.Topic(t, brokers, 2)
	group := prefix + "static"
	const session = 45 * time.Second
	newStage := func(id string) *Stage {
		st, err := New(Config{Name: "static", Group: group, Topics: []string{in}, Names: topics.NewNames(prefix),
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, InstanceID: id, SessionTimeout: session}, nopHandler)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	run := func(st *Stage) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- st.Run(ctx) }()
		return cancel, done
	}

	// Crash and restart: closing the client without a leave is what SIGKILL leaves behind.
	a := newStage("member-a")
	cancelA, doneA := run(a)
	waitFor(t, 60*time.Second, "first instance assigned", func() bool { return a.Ready() == nil })
	a.cl.Close()
	<-doneA
	cancelA()
	b := newStage("member-a")
	cancelB, doneB := run(b)
	pause := waitFor(t, session/2, "restarted instance assigned", func() bool { return b.Ready() == nil })
	t.Logf("restart with the same instance id got its partitions in %v (session timeout %v)", pause, session)
	if pause > 10*time.Second {
		t.Fatalf("restart took %v, want under 10s", pause)
	}

	// A second live instance with the same id fences the running one.
	c := newStage("member-a")
	cancelC, doneC := run(c)
	select {
	case err := <-doneB:
		if err == nil || !strings.Contains(err.Error(), "--instance-id") {
			t.Fatalf("fenced instance: Run = %v, want an error naming --instance-id", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fenced instance kept running")
	}
	cancelB()
	waitFor(t, 30*time.Second, "new instance assigned", func() bool { return c.Ready() == nil })

	// A graceful stop leaves: the group has no member left.
	cancelC()
	if err := <-doneC; err != nil {
		t.Fatalf("Run: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitFor(t, 10*time.Second, "group empty after the graceful stop", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dg, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
		return err == nil && len(dg[group].Members) == 0
	})
}

// TestRunFailsOnMissingTopic: a stage started before `wmrl topics create` says so and stops
// instead of polling for ever.
func TestRunFailsOnMissingTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := New(Config{Name: "early", Topics: []string{"t.rollouts.v1"}, Names: topics.NewNames("t."),
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}}, nopHandler)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "t.rollouts.v1 does not exist") || !strings.Contains(err.Error(), "wmrl topics create") {
			t.Fatalf("Run = %v, want the missing topic and its fix", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run kept polling a topic that does not exist")
	}
}
