package topics

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
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

func TestDeadLetterWriterBoundsParts(t *testing.T) {
	big := bytes.Repeat([]byte(`{"pad":"xxxxxxxx"}`), (10<<20)/18) // ~10 MB, as a poison record
	bigHeaders := []kgo.RecordHeader{Header("a", string(big[:MaxDLQHeaderBytes]))}
	small := []byte(`{"schema":"wmrl.rollout.v1"}`)
	cases := []struct {
		name     string
		key, val []byte
		headers  []kgo.RecordHeader
		limit    int // 0: default
		omitted  []string
	}{
		{name: "small record kept whole", key: []byte("r1"), val: small},
		{name: "value at the bound kept", key: []byte("r1"), val: big[:DefaultDLQMaxValueBytes]},
		{name: "value over the bound", key: []byte("r1"), val: big, omitted: []string{OmittedValue}},
		{name: "lower bound", key: []byte("r1"), val: small, limit: 8, omitted: []string{OmittedValue}},
		{name: "key over the bound", key: big[:MaxDLQKeyBytes+1], val: small, omitted: []string{OmittedKey}},
		{name: "headers over the bound", key: []byte("r1"), val: small, headers: bigHeaders, omitted: []string{OmittedHeaders}},
		{name: "everything", key: big[:MaxDLQKeyBytes+1], val: big, headers: bigHeaders,
			omitted: []string{OmittedKey, OmittedValue, OmittedHeaders}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewDeadLetterWriter(NewNames(""), "correct")
			if tc.limit > 0 {
				w = w.WithMaxValueBytes(tc.limit)
			}
			src := &kgo.Record{Topic: "wmrl.rewards.predicted.v1", Partition: 2, Offset: 77, Key: tc.key, Value: tc.val, Headers: tc.headers}
			dl := w.Record(src, ErrTooLarge)
			size := len(dl.Key) + len(dl.Value) + headerBytes(dl.Headers)
			if size > DefaultDLQMaxValueBytes+MaxDLQKeyBytes+MaxDLQHeaderBytes+2*MaxDLQErrorLen {
				t.Fatalf("dead letter of %d bytes", size)
			}
			d, err := ParseDeadLetter(dl)
			if err != nil {
				t.Fatal(err)
			}
			if d.SourceTopic != src.Topic || d.SourcePartition != 2 || d.SourceOffset != 77 || d.Reason != "too-large" {
				t.Errorf("source %s/%d@%d reason %s", d.SourceTopic, d.SourcePartition, d.SourceOffset, d.Reason)
			}
			var got []string
			for _, o := range d.Omitted {
				got = append(got, o.Part)
				var orig []byte
				switch o.Part {
				case OmittedKey:
					orig = tc.key
				case OmittedValue:
					orig = tc.val
				case OmittedHeaders:
					if o.Bytes != headerBytes(tc.headers) || o.SHA256 != "" {
						t.Errorf("headers part %+v", o)
					}
					continue
				}
				sum := sha256.Sum256(orig)
				if o.Bytes != len(orig) || o.SHA256 != hex.EncodeToString(sum[:]) {
					t.Errorf("%s part: %d bytes sha %s", o.Part, o.Bytes, o.SHA256)
				}
			}
			if !reflect.DeepEqual(got, tc.omitted) {
				t.Fatalf("omitted %v, want %v", got, tc.omitted)
			}
			keep := func(part string, b []byte) []byte {
				if slices.Contains(tc.omitted, part) {
					return nil
				}
				return b
			}
			if !bytes.Equal(d.Key, keep(OmittedKey, tc.key)) || !bytes.Equal(d.Value, keep(OmittedValue, tc.val)) {
				t.Errorf("key %d bytes value %d bytes", len(d.Key), len(d.Value))
			}
			if wantH := len(tc.headers); slices.Contains(tc.omitted, OmittedHeaders) && len(d.Headers) != 0 || !slices.Contains(tc.omitted, OmittedHeaders) && len(d.Headers) != wantH {
				t.Errorf("%d source headers kept", len(d.Headers))
			}

			// A dead letter dead-lettered again: the omissions of the first generation are the
			// second one's source headers, not its own.
			again := w.Record(&kgo.Record{Topic: dl.Topic, Offset: 3, Key: dl.Key, Headers: dl.Headers}, ErrConflict)
			d2, err := ParseDeadLetter(again)
			if err != nil {
				t.Fatal(err)
			}
			if len(d2.Omitted) != 0 || !reflect.DeepEqual(d2.Headers, dl.Headers) {
				t.Errorf("second generation: omitted %v, %d headers (want %d)", d2.Omitted, len(d2.Headers), len(dl.Headers))
			}
		})
	}
}

func TestDeadLetterWriterMinimal(t *testing.T) {
	w := NewDeadLetterWriter(NewNames(""), "sandbox").Minimal()
	src := &kgo.Record{Topic: "in", Key: []byte("r1"), Value: []byte("v"), Headers: []kgo.RecordHeader{Header("h", "x")}}
	d, err := ParseDeadLetter(w.Record(src, ErrInvalid))
	if err != nil {
		t.Fatal(err)
	}
	if d.Value != nil || len(d.Headers) != 0 || string(d.Key) != "r1" || len(d.Omitted) != 2 ||
		d.Omitted[0].Part != OmittedValue || d.Omitted[1].Part != OmittedHeaders {
		t.Errorf("minimal dead letter %+v", d)
	}
	// Nothing to leave out: nothing listed.
	d, _ = ParseDeadLetter(w.Record(&kgo.Record{Topic: "in"}, ErrInvalid))
	if len(d.Omitted) != 0 {
		t.Errorf("empty record: omitted %+v", d.Omitted)
	}
}

// FuzzParseDeadLetter: arbitrary headers (one "key=value" per line) never panic, and a parsed dead
// letter names the last occurrence of each DLQ header, as ParseDeadLetter documents.
func FuzzParseDeadLetter(f *testing.F) {
	src := &kgo.Record{Topic: "wmrl.rollouts.v1", Partition: 5, Offset: 1234, Key: []byte("r1"), Value: []byte("{}"),
		Timestamp: time.UnixMilli(1767225600123), Headers: Headers(SchemaRollout, "r1", 3)}
	dl := NewDeadLetterWriter(NewNames(""), "worldmodel").Record(src, errors.New("boom"))
	var seed strings.Builder
	for _, h := range dl.Headers {
		seed.WriteString(h.Key + "=" + string(h.Value) + "\n")
	}
	f.Add(seed.String())
	f.Add("wmrl-dlq-reason=x\nwmrl-dlq-partition=-1\n")
	f.Fuzz(func(t *testing.T, headers string) {
		r := &kgo.Record{Value: []byte("v")}
		for _, line := range strings.Split(headers, "\n") {
			k, v, _ := strings.Cut(line, "=")
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		d, err := ParseDeadLetter(r)
		if err != nil {
			return
		}
		last := map[string]string{}
		for _, h := range r.Headers {
			last[h.Key] = string(h.Value)
		}
		if d.Reason != last[HeaderDLQReason] || d.Stage != last[HeaderDLQStage] || d.SourceTopic != last[HeaderDLQTopic] {
			t.Fatalf("parsed %+v from headers %q", d, headers)
		}
	})
}
