package schemareg

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"

	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/wirepb"
)

// registered registers every topic of names on a fresh in-process double (srfake) and returns
// the Registry and the double.
func registered(t *testing.T, names topics.Names) (*Registry, *srfake.Registry, []Registered) {
	t.Helper()
	fake := NewDouble()
	t.Cleanup(fake.Close)
	r, err := New(Config{URLs: []string{fake.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Schemas(names)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := r.Register(context.Background(), ss...)
	if err != nil {
		t.Fatal(err)
	}
	return r, fake, regs
}

func TestSchemasCoverEveryTopicButRuns(t *testing.T) {
	names := topics.NewNames("lab.")
	ss, err := Schemas(names)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range ss {
		if s.Schema.Type != sr.TypeProtobuf || !bytes.Contains([]byte(s.Schema.Schema), []byte("package wmrl.v1;")) {
			t.Errorf("%s: not a wmrl.v1 Protobuf schema", s.Topic)
		}
		got[s.Topic] = true
	}
	for _, topic := range names.All() {
		if want := topic != names.Runs(); got[topic] != want {
			t.Errorf("%s: has schema %v, want %v", topic, got[topic], want)
		}
	}
}

// The frame is the standard serde's: franz-go's sr.Serde, given the same id and message index,
// encodes a message to the same bytes, and decodes what AppendFrame wrote.
func TestFrameIsTheStandardSerde(t *testing.T) {
	names := topics.NewNames("t.")
	r, _, _ := registered(t, names)
	id, ok := r.ID(names.Calibration())
	if !ok {
		t.Fatal("calibration: no id after Register")
	}
	msg := &wirepb.CalibrationEnd{RunId: "run-1", LastStep: 7, Reason: "done"}
	var serde sr.Serde
	// CalibrationEnd is calibration.proto's fourth message (index 3).
	serde.Register(id, &wirepb.CalibrationEnd{}, sr.Index(3),
		sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }),
		sr.DecodeFn(func(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }))
	want, err := serde.Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.AppendFrame(nil, names.Calibration(), []int{3}, payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("frame\n got % x\nwant % x", got, want)
	}
	var back wirepb.CalibrationEnd
	if err := serde.Decode(got, &back); err != nil {
		t.Fatalf("sr.Serde cannot decode our frame: %v", err)
	}
	if !proto.Equal(&back, msg) {
		t.Fatalf("round trip: got %v, want %v", &back, msg)
	}
	f, err := r.Unframe(context.Background(), names.Calibration(), got)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != id || len(f.Index) != 1 || f.Index[0] != 3 || !bytes.Equal(f.Payload, payload) {
		t.Fatalf("unframe: got %+v, want id %d index [3] payload % x", f, id, payload)
	}
}

func TestUnframeRefusals(t *testing.T) {
	names := topics.NewNames("t.")
	r, fake, _ := registered(t, names)
	ctx := context.Background()
	frame := func(id int) []byte {
		var h sr.ConfluentHeader
		b, err := h.AppendEncode(nil, id, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return append(b, 0x08, 0x01)
	}
	stepsID, _ := r.ID(names.Steps())
	// A later version of the rollouts subject, registered by another (newer) producer: accepted.
	newer, _, err := fake.RegisterSchema(Subject(names.Rollouts()), sr.Schema{Type: sr.TypeProtobuf,
		Schema: `syntax = "proto3"; package wmrl.v1; message Rollout { string run_id = 1; optional string note = 99; }`})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		value  []byte
		reason string
		is     error
	}{
		{"no magic byte", []byte(`{"schema":"wmrl.rollout.v1"}`), "malformed", topics.ErrMalformed},
		{"short", []byte{0, 0, 0}, "malformed", topics.ErrMalformed},
		{"unregistered id", frame(4242), "schema-unknown", topics.ErrSchemaNotRegistered},
		{"another topic's id", frame(stepsID), "schema-mismatch", topics.ErrSchemaMismatch},
		{"a newer version of the topic's subject", frame(newer), "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 2 { // the second time from the cache
				_, err := r.Unframe(ctx, names.Rollouts(), c.value)
				if c.is == nil {
					if err != nil {
						t.Fatalf("unexpected error %v", err)
					}
					continue
				}
				if !errors.Is(err, c.is) || topics.Reason(err) != c.reason {
					t.Fatalf("got %v (reason %q), want %v (reason %q)", err, topics.Reason(err), c.is, c.reason)
				}
			}
		})
	}
}

// A registry that cannot be reached is not a verdict on the record: the error is none of the
// dead-letter sentinels, so the stage retries instead of dead-lettering good records.
func TestUnframeUnreachableRegistryIsNoVerdict(t *testing.T) {
	fake := NewDouble()
	url := fake.URL()
	fake.Close()
	r, err := New(Config{URLs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	v, _ := h.AppendEncode(nil, 7, []int{0})
	_, err = r.Unframe(context.Background(), "t.rollouts.v1", v)
	if err == nil || errors.Is(err, topics.ErrSchemaNotRegistered) || errors.Is(err, topics.ErrSchemaMismatch) || errors.Is(err, topics.ErrMalformed) {
		t.Fatalf("got %v, want a plain (retryable) error", err)
	}
}

func TestRegisterIsIdempotentAndLookupReports(t *testing.T) {
	names := topics.NewNames("t.")
	r, _, first := registered(t, names)
	ss, _ := Schemas(names)
	again, err := r.Register(context.Background(), ss...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if again[i].ID != first[i].ID || again[i].Version != first[i].Version {
			t.Errorf("%s: registered again as id %d v%d, first id %d v%d", first[i].Subject, again[i].ID, again[i].Version, first[i].ID, first[i].Version)
		}
		got, err := r.Lookup(context.Background(), first[i].Topic)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != first[i].ID || got.Version != 1 || got.Compat != sr.CompatBackward {
			t.Errorf("%s: lookup %+v, want id %d v1 BACKWARD", first[i].Subject, got, first[i].ID)
		}
	}
	if _, err := r.Lookup(context.Background(), "t.nothing"); !IsCode(err, sr.ErrSubjectNotFound) {
		t.Errorf("lookup of an unregistered subject: %v, want SUBJECT_NOT_FOUND", err)
	}
}

func TestParseCompat(t *testing.T) {
	for in, want := range map[string]sr.CompatibilityLevel{"BACKWARD": sr.CompatBackward, "full_transitive": sr.CompatFullTransitive, "NONE": sr.CompatNone} {
		if got, err := ParseCompat(in); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if _, err := ParseCompat("SIDEWAYS"); err == nil {
		t.Error("SIDEWAYS accepted")
	}
}
