package schemareg

import (
	"bytes"
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/schemas"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/wirepb"
)

// The tests in this file run against a real registry (WMRL_TEST_REGISTRY; `make test` starts
// Apicurio Registry with deploy/local/registry.sh). Subjects carry a name unique to the test, as
// the registry is shared and keeps what it is given until it restarts.

func realRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := New(Config{URLs: []string{testenv.Registry(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Every topic's schema registers on the real registry (the imports of google/protobuf/timestamp.proto
// resolve there), the subject reports BACKWARD, and a record framed with the registered id
// unframes and decodes; unknown and foreign ids are refused with their reasons.
func TestRealRegistryRegisterFrameUnframe(t *testing.T) {
	r := realRegistry(t)
	ctx := ctxFor(t)
	names := topics.NewNames(testenv.Name(t) + ".")
	ss, err := Schemas(names)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := r.Register(ctx, ss...)
	if err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs {
		got, err := r.Lookup(ctx, reg.Topic)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != reg.ID || got.Version != 1 || got.Compat != sr.CompatBackward {
			t.Errorf("%s: registry reports id %d v%d %s, want id %d v1 BACKWARD", reg.Subject, got.ID, got.Version, got.Compat, reg.ID)
		}
	}
	// Registering again (a restart) finds the same ids.
	again, err := r.Register(ctx, ss...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range regs {
		if again[i].ID != regs[i].ID {
			t.Errorf("%s: id %d on the second start, %d on the first", regs[i].Subject, again[i].ID, regs[i].ID)
		}
	}

	msg := &wirepb.Rollout{RunId: "run-1", Step: 3, GroupId: "g1", RolloutId: "g1-r0", Stream: "code", Meta: map[string]string{"k": "v"}}
	payload, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.AppendFrame(nil, names.Rollouts(), []int{0}, payload)
	if err != nil {
		t.Fatal(err)
	}
	// A second process, which registered nothing, checks the id with the registry.
	reader := realRegistry(t)
	f, err := reader.Unframe(ctx, names.Rollouts(), v)
	if err != nil {
		t.Fatal(err)
	}
	var back wirepb.Rollout
	if err := proto.Unmarshal(f.Payload, &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, msg) {
		t.Fatalf("round trip: got %v, want %v", &back, msg)
	}

	stepsID, _ := r.ID(names.Steps())
	for _, c := range []struct {
		id     int
		reason string
	}{{1 << 30, "schema-unknown"}, {stepsID, "schema-mismatch"}} {
		var h sr.ConfluentHeader
		bad, _ := h.AppendEncode(nil, c.id, []int{0})
		_, err := reader.Unframe(ctx, names.Rollouts(), append(bad, payload...))
		if got := topics.Reason(err); got != c.reason {
			t.Errorf("id %d on %s: %v (reason %q), want reason %q", c.id, names.Rollouts(), err, got, c.reason)
		}
	}
}

// Schema evolution under BACKWARD on the real registry: retyping, removing or renaming a field is
// refused (Apicurio's Protobuf rule refuses a removal even when the number is `reserved`); adding
// an optional field is a new version, and a reader generated from the old schema passes over the
// new field.
func TestRealRegistryEvolution(t *testing.T) {
	r := realRegistry(t)
	ctx := ctxFor(t)
	topic := testenv.Name(t)
	text, err := fs.ReadFile(schemas.FS, "wmrl/v1/step.proto")
	if err != nil {
		t.Fatal(err)
	}
	v1 := string(text)
	if _, err := r.Register(ctx, TopicSchema{Topic: topic, Schema: sr.Schema{Type: sr.TypeProtobuf, Schema: v1}}); err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) sr.Schema {
		if !strings.Contains(v1, old) {
			t.Fatalf("step.proto has no %q", old)
		}
		return sr.Schema{Type: sr.TypeProtobuf, Schema: strings.Replace(v1, old, new, 1)}
	}
	for _, c := range []struct {
		name   string
		schema sr.Schema
	}{
		{"retype", edit("int64 size = 3;", "string size = 3;")},
		{"remove", edit("  bool anchor = 4;\n", "")},
		{"remove with reserved", edit("bool anchor = 4;", "reserved 4;")},
		{"rename", edit("string policy_version = 3;", "string policy_ver = 3;")},
	} {
		_, err := r.Register(ctx, TopicSchema{Topic: topic, Schema: c.schema})
		if !IsCode(err, sr.ErrIncompatibleSchema) {
			t.Errorf("%s: registry answered %v, want INCOMPATIBLE_SCHEMA (409)", c.name, err)
		}
	}
	added := edit("google.protobuf.Timestamp created_at = 7;", "google.protobuf.Timestamp created_at = 7;\n  optional string note = 8;")
	regs, err := r.Register(ctx, TopicSchema{Topic: topic, Schema: added})
	if err != nil {
		t.Fatalf("adding an optional field: %v", err)
	}
	if regs[0].Version != 2 {
		t.Fatalf("adding an optional field: version %d, want 2", regs[0].Version)
	}
	// A new writer's record (field 8 set) framed with the new id; the old reader accepts the id
	// (a version of its topic's subject) and its generated type skips the unknown field.
	old := &wirepb.StepManifest{RunId: "run-1", Step: 4, PolicyVersion: "p4"}
	payload, _ := proto.Marshal(old)
	payload = protowire.AppendTag(payload, 8, protowire.BytesType)
	payload = protowire.AppendString(payload, "a new field")
	v, err := r.AppendFrame(nil, topic, []int{1}, payload)
	if err != nil {
		t.Fatal(err)
	}
	reader := realRegistry(t)
	f, err := reader.Unframe(ctx, topic, v)
	if err != nil {
		t.Fatalf("old reader on a new version's id: %v", err)
	}
	var got wirepb.StepManifest
	if err := proto.Unmarshal(f.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetRunId() != "run-1" || got.GetStep() != 4 || got.GetPolicyVersion() != "p4" {
		t.Fatalf("old reader decoded %v", &got)
	}
}

// On the real broker: a record framed with an id the registry does not know is dead-lettered
// with reason schema-unknown, its value kept byte for byte, next to a good record that unframes.
func TestRealRegistryUnknownIDDeadLetteredOnBroker(t *testing.T) {
	r := realRegistry(t)
	brokers := testenv.Kafka(t)
	ctx := ctxFor(t)
	names := testenv.Topics(t, brokers, 1)
	ss, err := Schemas(names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, ss...); err != nil {
		t.Fatal(err)
	}
	payload, _ := proto.Marshal(&wirepb.PredictedReward{RunId: "run-1", RolloutId: "r0", Score: proto.Float64(0.5)})
	good, err := r.AppendFrame(nil, names.Predicted(), []int{0}, payload)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	bad, _ := h.AppendEncode(nil, 1<<30+7, []int{0})
	bad = append(bad, payload...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Predicted(), names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, v := range [][]byte{good, bad} {
		rec := &kgo.Record{Topic: names.Predicted(), Key: []byte("run-1"), Value: v}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	dlw := topics.NewDeadLetterWriter(names, "test")
	var decoded int
	var letters []*kgo.Record
	for decoded+len(letters) < 2 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("fetch: %v (decoded %d, dead letters %d)", err, decoded, len(letters))
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Topic == names.DLQ() {
				letters = append(letters, rec)
				return
			}
			if _, err := r.Unframe(ctx, rec.Topic, rec.Value); err != nil {
				if err := cl.ProduceSync(ctx, dlw.Record(rec, err)).FirstErr(); err != nil {
					t.Fatalf("dead letter: %v", err)
				}
				return
			}
			decoded++
		})
	}
	if decoded != 1 || len(letters) != 1 {
		t.Fatalf("decoded %d, dead letters %d; want 1 and 1", decoded, len(letters))
	}
	dl := letters[0]
	errText, _ := topics.HeaderValue(dl.Headers, topics.HeaderDLQError)
	if got, _ := topics.HeaderValue(dl.Headers, topics.HeaderDLQReason); got != "schema-unknown" {
		t.Errorf("dead letter reason %q, want schema-unknown (error %q)", got, errText)
	}
	if !bytes.Equal(dl.Value, bad) {
		t.Errorf("dead letter value % x, want the source's % x", dl.Value, bad)
	}
	t.Logf("dead letter: %s", errText)
}

// On the real registry: an id refused as another subject's is remembered for the TTL only. When
// a writer then registers the same schema under this topic's subject, the registry hands it the
// same id (Apicurio's ids name content), and the reader accepts it once the TTL has passed.
func TestRealRegistryForeignIDAcceptedAfterTTL(t *testing.T) {
	ctx := ctxFor(t)
	reader := realRegistry(t)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	reader.now = clock.now
	topic, other := testenv.Name(t), testenv.Name(t)
	text := `syntax = "proto3"; package wmrl.v1; message Rollout { string run_id = 1; optional string ` + strings.ReplaceAll(other, ".", "_") + ` = 2; }`
	schema := sr.Schema{Type: sr.TypeProtobuf, Schema: text}
	first, err := reader.Client().CreateSchema(ctx, Subject(other), schema)
	if err != nil {
		t.Fatal(err)
	}
	value := framed(t, first.ID)
	if _, err := reader.Unframe(ctx, topic, value); topics.Reason(err) != "schema-mismatch" {
		t.Fatalf("id %d of %s on %s: %v, want schema-mismatch", first.ID, Subject(other), topic, err)
	}
	ours, err := reader.Client().CreateSchema(ctx, Subject(topic), schema)
	if err != nil {
		t.Fatal(err)
	}
	if ours.ID != first.ID {
		t.Fatalf("the registry gave the same schema id %d under %s, %d under %s: the test's premise fails", ours.ID, Subject(topic), first.ID, Subject(other))
	}
	if _, err := reader.Unframe(ctx, topic, value); topics.Reason(err) != "schema-mismatch" {
		t.Fatalf("within the TTL: %v, want the remembered schema-mismatch", err)
	}
	clock.advance(DefaultNegativeTTL)
	if _, err := reader.Unframe(ctx, topic, value); err != nil {
		t.Fatalf("after the TTL, the id now registered under %s: %v", Subject(topic), err)
	}
}
