package trainer

import (
	"context"
	"reflect"
	"runtime/debug"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker, a record batch that decompresses to 256 MiB between committed steps of the
// advantages topic is skipped unread: every step arrives whole and in order, the skip is counted
// and committed with the next acknowledged step, peak memory stays inside the bound, and a
// restarted trainer of the group does not meet the batch again.
func TestStreamSkipsDecompressionBomb(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 1)
	p := newTxProducer(t, seeds, testenv.Name(t))
	var want []topics.AdvantageRow
	send := func(step int64) {
		rows := stepstest.StepRows("a", step, 4, 8)
		p.send(topic, true, stepstest.ChunkRecords(t, names, rows, smallChunk)...)
		want = append(want, rows...)
	}
	send(0)
	testenv.Bomb(t, seeds, topic, 0, 256<<20)
	send(1)
	send(2)

	group := testenv.Name(t)
	open := func() (*Stream, *[]error, func() float64) {
		skipped := oversize.NewCounter("train")
		skips := new([]error)
		s, err := New(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Topic: topic, Group: group, RunID: "a",
			OnSkip: func(err error) { *skips = append(*skips, err) }, BatchesSkipped: skipped})
		if err != nil {
			t.Fatal(err)
		}
		return s, skips, func() float64 {
			var m dto.Metric
			if err := skipped.WithLabelValues(topics.ReasonBatchTooLarge).Write(&m); err != nil {
				t.Fatal(err)
			}
			return m.GetCounter().GetValue()
		}
	}

	debug.FreeOSMemory()
	testenv.ResetPeakRSS(t)
	base := testenv.PeakRSS(t, 0)
	s, skips, count := open()
	var got []topics.AdvantageRow
	for step := int64(0); step <= 2; step++ {
		st := nextStep(t, s, 30*time.Second)
		if st.Run != "a" || st.Step != step {
			t.Fatalf("got step %s/%d, want a/%d", st.Run, st.Step, step)
		}
		got = append(got, st.Rows...)
		if err := st.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	peak := testenv.PeakRSS(t, 0)
	t.Logf("peak RSS of the test process while the trainer met the bomb: %d MiB (%d MiB before)", peak>>20, base>>20)
	if bound := int64(oversize.PeakFactor * topics.MaxBatchBytes(topics.MaxAdvantageBytes)); peak-base > bound && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("peak RSS grew by %d MiB, over the bound of %d MiB (oversize.PeakFactor × the limit)", (peak-base)>>20, bound>>20)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("delivered rows differ from the committed rows")
	}
	if n, st := count(), s.Stats(); n != 1 || st.SkippedBatches != 1 || len(*skips) != 0 {
		t.Errorf("%s = %v, Stats.SkippedBatches %d, record skips %v; want 1, 1, none", oversize.MetricName, n, st.SkippedBatches, *skips)
	}
	s.Close()

	send(3)
	s, _, count = open()
	defer s.Close()
	if st := nextStep(t, s, 30*time.Second); st.Step != 3 {
		t.Fatalf("restarted trainer got step %d, want 3 (0-2 and the batch were committed)", st.Step)
	}
	if n, st := count(), s.Stats(); n != 0 || st.SkippedBatches != 0 {
		t.Errorf("restarted trainer met the batch again: %s = %v, Stats.SkippedBatches %d", oversize.MetricName, n, st.SkippedBatches)
	}
}
