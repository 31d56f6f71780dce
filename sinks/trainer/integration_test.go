package trainer

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

// seedSteps writes, in transactions: run a steps 0..2 (step 1 preceded by an aborted attempt
// with different numbers), run b step 0, and a committed re-send of run a step 0 (a replayed
// chunk set). It returns the committed rows per run.
func seedSteps(t *testing.T, seeds []string, topic string) map[string][]topics.AdvantageRow {
	p := newTxProducer(t, seeds, testenv.Name(t))
	committed := map[string][]topics.AdvantageRow{}
	send := func(run string, step int64, commit bool, mutateRows bool) []*kgo.Record {
		rows := stepstest.StepRows(run, step, 4, 8)
		if mutateRows {
			for i := range rows {
				rows[i].Calibrated, rows[i].Used = 0.123, 0.123
			}
		}
		recs := stepstest.ChunkRecords(t, names, rows, smallChunk)
		p.send(topic, commit, recs...)
		if commit {
			committed[run] = append(committed[run], rows...)
		}
		return recs
	}
	step0 := send("a", 0, true, false)
	send("a", 1, false, true)
	send("a", 1, true, false)
	send("b", 0, true, false)
	send("a", 2, true, false)
	p.send(topic, true, step0...)
	return committed
}

func TestStreamDeliversOnlyCommittedSteps(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 3)
	committed := seedSteps(t, seeds, topic)

	s, skips := runAStream(t, seeds, topic)
	var got []topics.AdvantageRow
	for want := int64(0); want <= 2; want++ {
		st := nextStep(t, s, 30*time.Second)
		if st.Run != "a" || st.Step != want {
			t.Fatalf("got step %s/%d, want a/%d", st.Run, st.Step, want)
		}
		if len(st.Records) < 2 {
			t.Fatalf("step %d arrived in %d records; the test needs chunking", st.Step, len(st.Records))
		}
		got = append(got, st.Rows...)
		if err := st.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got, committed["a"]) {
		t.Fatal("delivered rows differ from the committed rows (aborted rows leaked?)")
	}
	noStep(t, s, 2*time.Second)
	if len(*skips) != 0 {
		t.Fatalf("skipped records: %v", *skips)
	}
	st := s.Stats()
	if st.Duplicates == 0 || st.Filtered == 0 {
		t.Fatalf("stats %+v: want the replayed step 0 counted as duplicates and run b filtered", st)
	}
}

func TestStreamAckSemantics(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 1)
	p := newTxProducer(t, seeds, testenv.Name(t))
	s0 := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 0, 4, 8), smallChunk)
	p.send(topic, true, s0...)
	p.send(topic, true, stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 1, 4, 8), smallChunk)...)
	group := testenv.Name(t)
	open := func() *Stream {
		s, err := New(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Topic: topic, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := open()
	if st := nextStep(t, s, 30*time.Second); st.Step != 0 {
		t.Fatalf("first stream: step %d, want 0", st.Step)
	}
	s.Close() // no Ack

	s = open()
	st := nextStep(t, s, 30*time.Second)
	if st.Step != 0 {
		t.Fatalf("without Ack a new stream must re-deliver step 0, got %d", st.Step)
	}
	if err := st.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Ack(context.Background()); err != nil {
		t.Fatalf("second Ack: %v", err)
	}
	s.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	// Step 0's records plus its commit marker.
	if o, ok := offs.Lookup(topic, 0); !ok || o.At != int64(len(s0)+1) {
		t.Fatalf("committed offset %+v, want %d", o, len(s0)+1)
	}

	s = open()
	defer s.Close()
	if st := nextStep(t, s, 30*time.Second); st.Step != 1 {
		t.Fatalf("after Ack a new stream must start at step 1, got %d", st.Step)
	}
}

func TestDigestTopicMatchesProducedRows(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 3)
	committed := seedSteps(t, seeds, topic)
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	one, err := DigestTopicResult(ctx, opts, topic, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := topics.DigestRows(committed["a"]); one.Digest != want || one.Rows != len(committed["a"]) {
		t.Fatalf("digest %s rows %d, want %s rows %d", one.Digest, one.Rows, want, len(committed["a"]))
	}
	res, err := DigestTopicResult(ctx, opts, topic, "")
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]topics.AdvantageRow(nil), committed["b"]...), committed["a"]...)
	if want := topics.DigestRows(all); res.Digest != want || res.Steps != 4 || res.Duplicates == 0 {
		t.Fatalf("all runs: %+v, want digest %s over 4 steps with duplicates", res, want)
	}
}

func TestDigestTopicRefusesIncompleteStep(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 1)
	p := newTxProducer(t, seeds, testenv.Name(t))
	recs := stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 0, 4, 8), smallChunk)
	p.send(topic, true, recs[1:]...)
	_, err := DigestTopicResult(context.Background(), []kgo.Opt{kgo.SeedBrokers(seeds...)}, topic, "a")
	var re *steps.RecordError
	if !errors.Is(err, steps.ErrIncomplete) || !errors.As(err, &re) || re.Pos.Topic != topic {
		t.Fatalf("err = %v, want steps.ErrIncomplete naming a record of %s", err, topic)
	}
}
