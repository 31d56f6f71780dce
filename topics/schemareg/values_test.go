package schemareg

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

var at = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func score(f float64) *float64 { return &f }

// framedNames is names in Protobuf on a registry with every schema registered.
func framedNames(t *testing.T) (topics.Names, *Registry) {
	t.Helper()
	names := topics.NewNames("frm.")
	r, _, _ := registered(t, names)
	names.Format, names.Registry = topics.FormatProtobuf, r
	return names, r
}

// Every framed topic's record goes out Confluent-framed with its own id and message index, says
// so in its content-type, and reads back (registry checked) to the value written.
func TestRecordsFramedAndRead(t *testing.T) {
	names, r := framedNames(t)
	ctx := context.Background()
	ro := topics.Rollout{Schema: topics.SchemaRollout, RolloutRef: topics.RolloutRef{RunID: "r1", Step: 3, GroupID: "g3", RolloutID: "g3-r2", Stream: "mle",
		PolicyVersion: "ckpt-3"}, Anchor: true, Index: 2, Prompt: "p", Artifact: "a", ArtifactSize: 1, CreatedAt: at}
	st := topics.StepManifest{Schema: topics.SchemaStep, RunID: "r1", Step: 3, PolicyVersion: "ckpt-3", CreatedAt: at,
		Groups: []topics.GroupManifest{{GroupID: "g3", Stream: "mle", Size: 8, Anchor: true}}}
	pr := topics.PredictedReward{Schema: topics.SchemaPredicted, RolloutRef: ro.RolloutRef, Anchor: true, Model: "wm", Status: topics.StatusOK, Score: score(0.5), CreatedAt: at}
	ex := topics.ExecutedReward{Schema: topics.SchemaExecuted, RolloutRef: ro.RolloutRef, Status: topics.StatusOK, Score: score(1), CreatedAt: at}

	type tc struct {
		name  string
		build func() (*kgo.Record, error)
		read  func(*kgo.Record) (any, error)
		want  any
		index []int
	}
	for _, c := range []tc{
		{"rollout", func() (*kgo.Record, error) { return names.RolloutRecord(ro) },
			func(rec *kgo.Record) (any, error) { return names.DecodeRolloutRecord(ctx, rec) }, ro, []int{0}},
		{"step", func() (*kgo.Record, error) { return names.StepRecord(st) },
			func(rec *kgo.Record) (any, error) { return names.DecodeStepRecord(ctx, rec) }, st, []int{1}},
		{"predicted", func() (*kgo.Record, error) { return names.PredictedRecord(pr) },
			func(rec *kgo.Record) (any, error) { return names.DecodePredictedRecord(ctx, rec) }, pr, []int{0}},
		{"executed", func() (*kgo.Record, error) { return names.ExecutedRecord(ex) },
			func(rec *kgo.Record) (any, error) { return names.DecodeExecutedRecord(ctx, rec) }, ex, []int{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			if ct, _ := topics.HeaderValue(rec.Headers, topics.HeaderContentType); ct != topics.ContentTypeProtobufConfluent {
				t.Fatalf("content-type %q", ct)
			}
			f, err := r.Unframe(ctx, rec.Topic, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := r.ID(rec.Topic); f.ID != id || !topics.EqualMessageIndex(f.Index, c.index) {
				t.Fatalf("frame id %d index %v, want %d %v", f.ID, f.Index, id, c.index)
			}
			got, err := c.read(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("read %+v\nwant %+v", got, c.want)
			}
			// A reader without a registry skips the frame unchecked and reads the same value.
			plain := topics.Names{Prefix: names.Prefix}
			var again any
			switch c.name {
			case "rollout":
				again, err = plain.DecodeRolloutRecord(ctx, rec)
			case "step":
				again, err = plain.DecodeStepRecord(ctx, rec)
			case "predicted":
				again, err = plain.DecodePredictedRecord(ctx, rec)
			case "executed":
				again, err = plain.DecodeExecutedRecord(ctx, rec)
			}
			if err != nil || !reflect.DeepEqual(again, c.want) {
				t.Fatalf("unchecked read: %+v, %v", again, err)
			}
		})
	}
	// The run-control topic has no schema: Protobuf, not framed.
	end, err := names.EndRequestRecord("r1", 3, at)
	if err != nil {
		t.Fatal(err)
	}
	if ct, _ := topics.HeaderValue(end.Headers, topics.HeaderContentType); ct != topics.ContentTypeProtobuf {
		t.Fatalf("end request content-type %q", ct)
	}
}

// A framed record whose id the registry does not know is dead-lettered as schema-unknown; one
// framed with another topic's id, or another message index, as schema-mismatch.
func TestFramedRecordsRefused(t *testing.T) {
	names, r := framedNames(t)
	ctx := context.Background()
	pr := topics.PredictedReward{Schema: topics.SchemaPredicted, RolloutRef: topics.RolloutRef{RunID: "r1", Step: 1, GroupID: "g", RolloutID: "g-r0", Stream: "s"},
		Model: "wm", Status: topics.StatusOK, Score: score(0.5), CreatedAt: at}
	rec, err := names.PredictedRecord(pr)
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.Unframe(ctx, rec.Topic, rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	stepID, _ := r.ID(names.Steps())
	for _, c := range []struct {
		name, reason string
		value        []byte
	}{
		{"unknown id", "schema-unknown", append([]byte{0, 0x7f, 0, 0, 1, 0}, f.Payload...)},
		{"other topic's id", "schema-mismatch", must(r.hdr.AppendEncode(nil, stepID, []int{0}))},
		{"other message index", "schema-mismatch", must(r.hdr.AppendEncode(nil, f.ID, []int{1}))},
		{"no frame", "malformed", []byte{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := *rec
			bad.Value = c.value
			_, err := names.DecodePredictedRecord(ctx, &bad)
			if got := topics.Reason(err); got != c.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, c.reason)
			}
		})
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A registry that cannot be reached is retried, never a verdict: the read ends only with its
// context, with the context's error (which the stages do not dead-letter).
func TestUnreachableRegistryIsRetried(t *testing.T) {
	names := topics.NewNames("frm.")
	fake := NewDouble()
	r, err := New(Config{URLs: []string{fake.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Schemas(names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(context.Background(), ss...); err != nil {
		t.Fatal(err)
	}
	names.Format, names.Registry = topics.FormatProtobuf, r
	rec, err := names.ExecutedRecord(topics.ExecutedReward{Schema: topics.SchemaExecuted,
		RolloutRef: topics.RolloutRef{RunID: "r1", Step: 1, GroupID: "g", RolloutID: "g-r0", Stream: "s"}, Status: topics.StatusOK, Score: score(1), CreatedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	fake.Close()
	// An id this process has not seen needs the registry.
	rec.Value = append([]byte{0, 0, 0, 0x30, 0x39, 0}, rec.Value[6:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	_, err = names.DecodeExecutedRecord(ctx, rec)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	for _, sentinel := range []error{topics.ErrSchemaNotRegistered, topics.ErrSchemaMismatch, topics.ErrMalformed} {
		if errors.Is(err, sentinel) {
			t.Fatalf("err %v is %v: would be dead-lettered", err, sentinel)
		}
	}
}
