package stage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// runEcho runs a stage whose handler doubles numeric values and rejects the rest, over the
// given brokers, and checks that every input got exactly one output or dead letter.
func runEcho(t *testing.T, brokers []string, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := topics.NewNames(prefix)
	in, out := prefix+"in", prefix+"out"
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, in, out, names.DLQ()); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		v := strconv.Itoa(i)
		if i%50 == 7 {
			v = "not-a-number-" + v
		}
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i % 5)), Value: []byte(v)})
	}
	if err := admCl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var handled atomic.Int64
	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		handled.Add(1)
		x, err := strconv.Atoi(string(r.Value))
		if err != nil {
			return nil, &topics.FieldError{Record: "test", Field: "value", Value: string(r.Value), Reason: "not an integer"}
		}
		return []*kgo.Record{{Topic: out, Key: r.Key, Value: []byte(strconv.Itoa(2 * x))}}, nil
	}
	reg := prometheus.NewPedanticRegistry()
	st, err := New(Config{Name: "echo", Group: prefix + "echo", Topics: []string{in}, Names: names, Registry: reg,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Concurrency: 8, CommitInterval: 50 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runStage(ctx, st)

	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out, names.DLQ()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	outputs, dead := map[string]int{}, 0
	for len(outputs)+dead < n && ctx.Err() == nil {
		reader.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if r.Topic == out {
				outputs[string(r.Value)]++
				return
			}
			dead++
			if reason, _ := topics.HeaderValue(r.Headers, topics.HeaderDLQReason); reason == "" {
				t.Errorf("dead letter without reason header: %v", r.Headers)
			}
		})
	}
	if dead != 4 || len(outputs) != n-4 {
		t.Fatalf("outputs %d, dead letters %d; want %d and 4", len(outputs), dead, n-4)
	}
	for v, c := range outputs {
		if c != 1 {
			t.Errorf("output %s produced %d times", v, c)
		}
	}
	checkStageMetrics(t, reg)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Everything handled was committed on shutdown: the group's lag is zero.
	if total := groupLag(ctx, t, adm, prefix+"echo"); total != 0 {
		t.Fatalf("lag after graceful shutdown: %d", total)
	}
	if h := handled.Load(); h != n {
		t.Fatalf("handler ran %d times for %d records", h, n)
	}
}

// checkStageMetrics asserts, while the echo stage runs, the dead letters by reason and the
// client's buffered-record gauges under their gauge names (kprom's *_total names left out).
func checkStageMetrics(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
		if mf.GetType() == dto.MetricType_GAUGE && strings.HasSuffix(mf.GetName(), "_total") {
			t.Errorf("gauge %s is named like a counter", mf.GetName())
		}
	}
	dl := byName["wmrl_stage_dead_letters_total"]
	if dl == nil || len(dl.GetMetric()) != 1 {
		t.Fatalf("wmrl_stage_dead_letters_total = %v, want one reason", dl)
	}
	m := dl.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["reason"] != "invalid-field:value" || labels["stage"] != "echo" || m.GetCounter().GetValue() != 4 {
		t.Errorf("dead letters %v = %v, want 4 with reason invalid-field:value, stage echo", labels, m.GetCounter().GetValue())
	}
	for _, name := range []string{"wmrl_kafka_buffered_produce_records", "wmrl_kafka_buffered_fetch_records"} {
		if mf := byName[name]; mf == nil || mf.GetType() != dto.MetricType_GAUGE {
			t.Errorf("gauge %s not exported: %v", name, mf)
		}
	}
}

func TestStageInProcess(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runEcho(t, c.ListenAddrs(), "stagetest.")
}

// TestStageHandsBackOnShutdown checks that a handler still running when the grace period ends
// is interrupted and its record stays uncommitted for the next owner.
func TestStageHandsBackOnShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, cl := fakeInput(ctx, t, []string{"slow"}, "a", "b")
	started := make(chan struct{}, 2)
	h := func(hctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if string(r.Value) == "a" {
			return nil, nil
		}
		started <- struct{}{}
		<-hctx.Done()
		return nil, fmt.Errorf("interrupted: %w", hctx.Err())
	}
	st, err := New(Config{Name: "slow", Topics: []string{"slow"}, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		Concurrency: 2, ShutdownGrace: 100 * time.Millisecond, CommitInterval: time.Hour}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runStage(ctx, st)
	<-started
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "wmrl-slow")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup("slow", 0)
	if !ok || o.At != 1 {
		t.Fatalf("committed offset %+v, want 1 (record a done, record b handed back)", o)
	}
}

func TestStageRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	runEcho(t, brokers, testenv.Name(t)+".")
}

// TestStageShutdownWithUnacknowledgedProduce checks that a broker that never acknowledges the
// outputs cannot hold shutdown beyond the grace period: the record is handed back, not
// committed, and Run returns without error.
func TestStageShutdownWithUnacknowledgedProduce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _ := fakeInput(ctx, t, []string{"in", "out"}, "x")
	// From now on the broker swallows every produce request until the test ends.
	release := make(chan struct{})
	defer close(release)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, errors.New("test: produce dropped"), true
	})
	handled := make(chan struct{}, 1)
	h := func(context.Context, *kgo.Record) ([]*kgo.Record, error) {
		handled <- struct{}{}
		return []*kgo.Record{{Topic: "out", Value: []byte("y")}}, nil
	}
	st, err := New(Config{Name: "stuck", Topics: []string{"in"}, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		ShutdownGrace: 200 * time.Millisecond, CommitInterval: time.Hour}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runStage(ctx, st)
	<-handled
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a graceful stop: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown waited for a produce acknowledgement far beyond the grace period")
	}
	if o := st.track.committable(nil); len(o) != 0 {
		t.Fatalf("an unacknowledged record became committable: %v", o)
	}
}

// fakeInput starts an in-process Kafka (kfake) with the topics (one partition each) and writes
// values to the first with the client it returns; both close when the test ends.
func fakeInput(ctx context.Context, t *testing.T, topics []string, values ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topics[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// runStage runs st in the background until stop; done then yields what Run returned.
func runStage(ctx context.Context, st *Stage) (stop context.CancelFunc, done <-chan error) {
	runCtx, stop := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { ch <- st.Run(runCtx) }()
	return stop, ch
}

// groupLag sums group's lag over every partition, a negative (unknown) one included so that it
// cannot pass for zero.
func groupLag(ctx context.Context, t *testing.T, adm *kadm.Client, group string) int64 {
	t.Helper()
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	lags.Each(func(l kadm.DescribedGroupLag) {
		for _, ps := range l.Lag {
			for _, p := range ps {
				total += p.Lag
			}
		}
	})
	return total
}
