package trainer

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

func fakeCluster(t *testing.T, topic string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// TestStreamEdgeCasesKfake runs the reassembly edge cases end to end through a Stream on an
// in-process broker: chunks out of order, a duplicated chunk, a record with a bad header and a
// chunk set whose n disagrees. Every good step arrives whole; every bad record is reported once
// with its topic/partition/offset; nothing wedges.
func TestStreamEdgeCasesKfake(t *testing.T) {
	topic := names.Advantages()
	seeds := fakeCluster(t, topic)
	p := newTxProducer(t, seeds, "tx-edge")

	s0 := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 0, 4, 8), smallChunk)
	s1 := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 1, 4, 8), smallChunk)
	s2 := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 2, 4, 8), smallChunk)
	short := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 2, 1, 2), smallChunk)
	p.send(topic, true, stepstest.Reverse(s0)...)                                                           // offsets 0..n-1, marker n
	p.send(topic, true, s1[0], s1[0], stepstest.WithoutHeader(s1[1], topics.HeaderStep))                    // dup + bad header
	p.send(topic, true, s1[1:]...)                                                                          // rest of step 1
	p.send(topic, false, stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 2, 2, 2), smallChunk)...) // aborted
	p.send(topic, true, append([]*kgo.Record{s2[0], short[0]}, s2[1:]...)...)                               // mismatched n

	var mu sync.Mutex
	var skipped []error
	s, err := New(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Group: "g",
		OnSkip: func(err error) { mu.Lock(); skipped = append(skipped, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, want := range [][]topics.AdvantageRow{stepstest.StepRows("a", 0, 4, 8), stepstest.StepRows("a", 1, 4, 8), stepstest.StepRows("a", 2, 4, 8)} {
		st := nextStep(t, s, 20*time.Second)
		if st.Step != int64(i) || !reflect.DeepEqual(st.Rows, want) {
			t.Fatalf("step %d: got step %d with %d rows, want %d rows", i, st.Step, len(st.Rows), len(want))
		}
		if err := st.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) != 2 {
		t.Fatalf("skipped %v, want the bad header and the mismatched chunk", skipped)
	}
	var re *steps.RecordError
	if !errors.As(skipped[0], &re) || !errors.Is(skipped[0], topics.ErrBadHeader) || re.Pos != (steps.Pos{Topic: topic, Partition: 0, Offset: int64(len(s0)) + 1 + 2}) {
		t.Errorf("first skip %v, want ErrBadHeader at %s/0@%d", skipped[0], topic, len(s0)+3)
	}
	if !errors.Is(skipped[1], steps.ErrChunkMismatch) {
		t.Errorf("second skip %v, want steps.ErrChunkMismatch", skipped[1])
	}
	if st := s.Stats(); st.Duplicates != 1 || st.Skipped != 2 || st.Steps != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestRunAcksAfterCallbackKfake(t *testing.T) {
	topic := names.Advantages()
	seeds := fakeCluster(t, topic)
	p := newTxProducer(t, seeds, "tx-run")
	for step := int64(0); step < 3; step++ {
		p.send(topic, true, stepstest.ChunkRecords(t, names, stepstest.StepRows("a", step, 2, 4), smallChunk)...)
	}
	open := func() *Stream {
		s, err := New(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	boom := errors.New("trainer failed")
	var seen []int64
	err := s.Run(context.Background(), func(_ context.Context, st *Step) error {
		seen = append(seen, st.Step)
		if st.Step == 1 {
			return boom
		}
		return nil
	})
	s.Close()
	if !errors.Is(err, boom) || !reflect.DeepEqual(seen, []int64{0, 1}) {
		t.Fatalf("Run = %v after %v, want the callback's error after steps 0 and 1", err, seen)
	}
	s = open()
	defer s.Close()
	if st := nextStep(t, s, 20*time.Second); st.Step != 1 {
		t.Fatalf("after a failed callback step %d was not re-delivered first (got %d)", 1, st.Step)
	}
}
