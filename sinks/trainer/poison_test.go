package trainer

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

// 10 MB compressible records on the advantages topic between real steps, on the real broker:
// one without headers and one posing as the only chunk of step 1. Both are skipped with a
// *RecordError, and every real step still arrives whole, in order.
func TestStreamSkipsPoisonRecords(t *testing.T) {
	seeds := testenv.Kafka(t)
	topic := testenv.Topic(t, seeds, 1)
	p := newTxProducer(t, seeds, testenv.Name(t))
	var want []topics.AdvantageRow
	send := func(step int64) {
		rows := stepstest.StepRows("a", step, 4, 8)
		p.send(topic, true, stepstest.ChunkRecords(t, names, rows, smallChunk)...)
		want = append(want, rows...)
	}
	poison := testenv.PoisonJSON(`"schema":"wmrl.advantages.v1"`, testenv.PoisonBytes)
	send(0)
	testenv.ProduceCompressed(t, seeds,
		&kgo.Record{Topic: topic, Key: []byte("a"), Value: poison},
		&kgo.Record{Topic: topic, Key: []byte("a"), Value: poison, Headers: topics.Headers(topics.SchemaAdvantages, "a", 1,
			topics.Header(topics.HeaderChunk, "0/1"), topics.Header(topics.HeaderRows, "32"))})
	send(1)
	send(2)

	s, skips := runAStream(t, seeds, topic)
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
	if !reflect.DeepEqual(got, want) {
		t.Fatal("delivered rows differ from the committed rows")
	}
	if len(*skips) == 0 {
		t.Fatal("no poison record reported as skipped")
	}
	for _, err := range *skips {
		var re *steps.RecordError
		if !errors.As(err, &re) {
			t.Errorf("skip %v is not a *RecordError", err)
		}
		t.Logf("skipped: %v", err)
	}
}
