package stage

import (
	"context"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// bombBytes is what the test bombs decompress to: sixteen times the default limit, small enough
// for the shared test broker to validate quickly.
const bombBytes = 256 << 20

// On the real broker, the shared stage runtime (worldmodel and sandbox run on it) meets a record
// batch that decompresses to 256 MiB between valid records: it dead-letters the batch by
// reference, counts it, processes the records after it, keeps its peak memory inside the bound
// and commits past the batch, so a restarted member of the group does not meet it again.
func TestStageSkipsDecompressionBomb(t *testing.T) {
	brokers := testenv.Kafka(t)
	names := testenv.Topics(t, brokers, 1)
	in, out := names.Rollouts(), names.Predicted()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	testenv.Produce(t, brokers, []*kgo.Record{{Topic: in, Value: []byte("1")}})
	bomb := testenv.Bomb(t, brokers, in, 0, bombBytes)
	testenv.Produce(t, brokers, []*kgo.Record{{Topic: in, Value: []byte("2")}, {Topic: in, Value: []byte("3")}})

	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		x, err := strconv.Atoi(string(r.Value))
		if err != nil {
			return nil, &topics.FieldError{Record: "test", Field: "value", Reason: "not an integer", Err: topics.ErrInvalid}
		}
		return []*kgo.Record{{Topic: out, Value: []byte(strconv.Itoa(2 * x))}}, nil
	}
	group := names.Rollouts() + ".bomb"
	newStage := func(reg *prometheus.Registry) *Stage {
		st, err := New(Config{Name: "bomb", Group: group, Topics: []string{in}, Names: names, Registry: reg,
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Concurrency: 2, CommitInterval: 50 * time.Millisecond}, h)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out, names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var outputs []string
	var dead []topics.DeadLetter
	readUntil := func(n, nDead int) {
		t.Helper()
		for len(outputs) < n || len(dead) < nDead {
			fs := reader.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("outputs %v, %d dead letters: the stage stalled", outputs, len(dead))
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == out {
					outputs = append(outputs, string(r.Value))
					return
				}
				d, err := topics.ParseDeadLetter(r)
				if err != nil {
					t.Fatal(err)
				}
				dead = append(dead, d)
			})
		}
	}

	runtimeGC()
	testenv.ResetPeakRSS(t)
	base := testenv.PeakRSS(t, 0)
	reg := prometheus.NewRegistry()
	stop, done := runStage(ctx, newStage(reg))
	readUntil(3, 1)
	time.Sleep(time.Second) // a duplicate or a late dead letter would show meanwhile
	readUntil(3, 1)
	peak := testenv.PeakRSS(t, 0)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v (a bomb must not stop the stage)", err)
	}
	t.Logf("peak RSS of the test process while the stage met the bomb: %d MiB (%d MiB before)", peak>>20, base>>20)
	if bound := int64(oversize.PeakFactor * topics.MaxBatchBytes(topics.MaxRecordBytes)); peak-base > bound && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("peak RSS grew by %d MiB, over the bound of %d MiB (oversize.PeakFactor × the limit)", (peak-base)>>20, bound>>20)
	}
	slices.Sort(outputs)
	if got := strings.Join(outputs, ","); got != "2,4,6" {
		t.Errorf("outputs %s, want 2,4,6", got)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters (first reason %q), want one for the batch", len(dead), dead[0].Reason)
	}
	d := dead[0]
	if d.Reason != topics.ReasonBatchTooLarge || d.Stage != "bomb" || d.SourceTopic != in || d.SourcePartition != 0 ||
		d.SourceOffset != bomb.BaseOffset || d.SourceEndOffset != bomb.NextOffset ||
		d.LimitBytes != topics.MaxBatchBytes(topics.MaxRecordBytes) || d.Value != nil ||
		d.CompressedBytes != bomb.CompressedBytes+testenv.BatchHeaderBytes {
		t.Errorf("dead letter %+v, want a reference to %s/0 offsets [%d, %d) with reason %s", d, in, bomb.BaseOffset, bomb.NextOffset, topics.ReasonBatchTooLarge)
	}
	if v := metricValue(t, reg, oversize.MetricName); v != 1 {
		t.Errorf("%s = %v, want 1", oversize.MetricName, v)
	}
	adm := kadm.NewClient(reader)
	if lag := groupLag(ctx, t, adm, group); lag != 0 {
		t.Errorf("lag %d after shutdown: the skipped batch must be committed", lag)
	}

	// A restarted member resumes after the batch: it skips nothing and dead-letters nothing.
	testenv.Produce(t, brokers, []*kgo.Record{{Topic: in, Value: []byte("4")}})
	reg2 := prometheus.NewRegistry()
	stop, done = runStage(ctx, newStage(reg2))
	readUntil(4, 1)
	time.Sleep(time.Second)
	readUntil(4, 1)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after restart: %v", err)
	}
	if v := metricValue(t, reg2, oversize.MetricName); v != 0 || len(dead) != 1 || len(outputs) != 4 {
		t.Errorf("after restart: %s = %v, dead letters %d, outputs %v; want 0, 1, [2 4 6 8]", oversize.MetricName, v, len(dead), outputs)
	}
}

// runtimeGC returns freed memory to the OS before a peak is measured, so earlier tests' garbage
// does not count against the stage.
func runtimeGC() { debug.FreeOSMemory() }
