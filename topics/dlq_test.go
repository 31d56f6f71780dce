package topics

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDeadLetterWriter(t *testing.T) {
	w := NewDeadLetterWriter(NewNames(""), "worldmodel")
	orig := []byte(`{"schema":"wmrl.rollout.v1","run_id":"r1","step":"3"}`)
	src := &kgo.Record{
		Topic: "wmrl.rollouts.v1", Partition: 5, Offset: 1234, Key: []byte("r1"), Value: orig,
		Timestamp: time.UnixMilli(1767225600123),
		Headers:   Headers(SchemaRollout, "r1", 3, Header("traceparent", "00-abc-def-01")),
	}
	_, derr := DecodeRollout(src.Value)
	if derr == nil {
		t.Fatal("fixture should fail to decode")
	}
	dl := w.Record(src, derr)
	if dl.Topic != "wmrl.dlq.v1" || !bytes.Equal(dl.Key, src.Key) || !bytes.Equal(dl.Value, orig) {
		t.Fatalf("topic %q key %q value %q", dl.Topic, dl.Key, dl.Value)
	}
	src.Value[0] = 'X' // the dead letter must not alias the source's buffers
	if dl.Value[0] != '{' {
		t.Error("dead letter aliases the source value")
	}
	src.Value[0] = '{'

	p, err := ParseDeadLetter(dl)
	if err != nil {
		t.Fatal(err)
	}
	if p.Reason != "invalid-field:step" || p.Stage != "worldmodel" || p.SourceTopic != "wmrl.rollouts.v1" ||
		p.SourcePartition != 5 || p.SourceOffset != 1234 || !p.SourceTime.Equal(src.Timestamp) {
		t.Errorf("parsed %+v", p)
	}
	if !strings.Contains(p.Error, `field "step"`) {
		t.Errorf("error text %q", p.Error)
	}
	if !reflect.DeepEqual(p.Headers, src.Headers) {
		t.Errorf("original headers not preserved:\n got %v\nwant %v", p.Headers, src.Headers)
	}

	// Dead-lettering a dead letter keeps both generations; the newest wins.
	again := w.Record(&kgo.Record{Topic: dl.Topic, Partition: 0, Offset: 9, Key: dl.Key, Value: dl.Value, Headers: dl.Headers}, ErrTooLarge)
	p2, err := ParseDeadLetter(again)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Reason != "too-large" || p2.SourceTopic != "wmrl.dlq.v1" || p2.SourceOffset != 9 {
		t.Errorf("second generation %+v", p2)
	}
	if !reflect.DeepEqual(p2.Headers, dl.Headers) {
		t.Error("first generation headers lost")
	}

	long := w.Record(src, errors.New(strings.Repeat("é", MaxDLQErrorLen)))
	if e, _ := HeaderValue(long.Headers, HeaderDLQError); len(e) > MaxDLQErrorLen || !strings.HasSuffix(e, "…") {
		t.Errorf("error header %d bytes", len(e))
	}
	if _, err := ParseDeadLetter(src); !errors.Is(err, ErrBadHeader) {
		t.Errorf("plain record parsed as dead letter: %v", err)
	}
}
