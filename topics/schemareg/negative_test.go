package schemareg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/wmrl/wmrl/topics"
)

// fakeClock is the clock a Registry's refusals expire by in these tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func framed(t *testing.T, id int) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, 0x08, 0x01)
}

// nextID is the id the double will hand out next (it numbers schemas in order); the tests
// check that it did.
func nextID(regs []Registered) int {
	id := 0
	for _, r := range regs {
		id = max(id, r.ID)
	}
	return id + 1
}

// An id unknown when a record arrives is dead-lettered (schema-unknown) and that verdict is
// remembered for the TTL, so records with the id are refused without asking the registry; a
// writer that registers the id afterwards has its records accepted once the TTL has passed.
func TestUnknownIDAcceptedAfterTTLOnceRegistered(t *testing.T) {
	names := topics.NewNames("t.")
	r, fake, regs := registered(t, names)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r.now = clock.now
	ctx := context.Background()
	id := nextID(regs)
	value := framed(t, id)

	_, err := r.Unframe(ctx, names.Rollouts(), value)
	if topics.Reason(err) != "schema-unknown" {
		t.Fatalf("unregistered id %d: %v (reason %q), want schema-unknown", id, err, topics.Reason(err))
	}
	src := &kgo.Record{Topic: names.Rollouts(), Key: []byte("run-1"), Value: value}
	dl := topics.NewDeadLetterWriter(names, "test").Record(src, err)
	if got, _ := topics.HeaderValue(dl.Headers, topics.HeaderDLQReason); dl.Topic != names.DLQ() || got != "schema-unknown" {
		t.Fatalf("dead letter to %s with reason %q, want %s with schema-unknown", dl.Topic, got, names.DLQ())
	}

	// The writer registers its (newer) version of the subject: it gets the id the record carries.
	got, _, err := fake.RegisterSchema(Subject(names.Rollouts()), sr.Schema{Type: sr.TypeProtobuf,
		Schema: `syntax = "proto3"; package wmrl.v1; message Rollout { string run_id = 1; optional string note = 99; }`})
	if err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Fatalf("the double handed out id %d, the test expected %d", got, id)
	}
	clock.advance(DefaultNegativeTTL - time.Second)
	if _, err := r.Unframe(ctx, names.Rollouts(), value); !errors.Is(err, topics.ErrSchemaNotRegistered) {
		t.Fatalf("within the TTL: %v, want the remembered schema-unknown (no registry call)", err)
	}
	clock.advance(time.Second)
	if _, err := r.Unframe(ctx, names.Rollouts(), value); err != nil {
		t.Fatalf("after the TTL, id %d registered meanwhile: %v", id, err)
	}
	fake.Close() // from now on only the cache answers: a registered id is remembered for good
	clock.advance(time.Hour)
	if _, err := r.Unframe(ctx, names.Rollouts(), value); err != nil {
		t.Fatalf("accepted id, registry gone: %v", err)
	}
	if r.nneg != 0 {
		t.Errorf("%d refusals remembered, want 0 once the id was accepted", r.nneg)
	}
}

// A foreign id (another subject's) is refused for the TTL; when a writer registers the same
// schema under this topic's subject, the registry gives it the same id, which is then accepted.
func TestForeignIDAcceptedAfterTTLOnceSharedBySubject(t *testing.T) {
	names := topics.NewNames("t.")
	r, fake, _ := registered(t, names)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r.now = clock.now
	ctx := context.Background()
	const text = `syntax = "proto3"; package wmrl.v1; message Rollout { string run_id = 1; optional string shared = 98; }`
	id, _, err := fake.RegisterSchema("t.elsewhere-value", sr.Schema{Type: sr.TypeProtobuf, Schema: text})
	if err != nil {
		t.Fatal(err)
	}
	value := framed(t, id)
	if _, err := r.Unframe(ctx, names.Rollouts(), value); topics.Reason(err) != "schema-mismatch" {
		t.Fatalf("foreign id %d: %v, want schema-mismatch", id, err)
	}
	same, _, err := fake.RegisterSchema(Subject(names.Rollouts()), sr.Schema{Type: sr.TypeProtobuf, Schema: text})
	if err != nil {
		t.Fatal(err)
	}
	if same != id {
		t.Fatalf("the double gave the same schema a new id (%d, first %d), as a registry does not", same, id)
	}
	if _, err := r.Unframe(ctx, names.Rollouts(), value); topics.Reason(err) != "schema-mismatch" {
		t.Fatalf("within the TTL: %v, want the remembered schema-mismatch", err)
	}
	clock.advance(DefaultNegativeTTL)
	if _, err := r.Unframe(ctx, names.Rollouts(), value); err != nil {
		t.Fatalf("after the TTL: %v", err)
	}
}

// The memory of refusals stays bounded; when it is full, expired refusals make room.
func TestNegativeMemoryBoundedAndSwept(t *testing.T) {
	names := topics.NewNames("t.")
	r, _, _ := registered(t, names)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r.now = clock.now
	ctx := context.Background()
	for i := range maxNegative + 10 {
		if _, err := r.Unframe(ctx, names.Rollouts(), framed(t, 1<<20+i)); !errors.Is(err, topics.ErrSchemaNotRegistered) {
			t.Fatalf("id %d: %v", 1<<20+i, err)
		}
	}
	if r.nneg != maxNegative {
		t.Fatalf("%d refusals remembered, want the bound %d", r.nneg, maxNegative)
	}
	clock.advance(DefaultNegativeTTL)
	if _, err := r.Unframe(ctx, names.Rollouts(), framed(t, 1<<21)); !errors.Is(err, topics.ErrSchemaNotRegistered) {
		t.Fatal(err)
	}
	if r.nneg != 1 || r.negative[names.Rollouts()][1<<21].err == nil {
		t.Fatalf("after the TTL: %d refusals remembered (the new one: %v), want only the new one", r.nneg, r.negative[names.Rollouts()][1<<21].err != nil)
	}
}

func TestNegativeTTLConfig(t *testing.T) {
	if _, err := New(Config{URLs: []string{"http://127.0.0.1:1"}, NegativeTTL: -time.Second}); err == nil {
		t.Error("a negative TTL was accepted")
	}
	r, err := New(Config{URLs: []string{"http://127.0.0.1:1"}})
	if err != nil || r.negTTL != DefaultNegativeTTL {
		t.Errorf("default TTL %v, %v; want %v", r.negTTL, err, DefaultNegativeTTL)
	}
	r, err = New(Config{URLs: []string{"http://127.0.0.1:1"}, NegativeTTL: time.Second})
	if err != nil || r.negTTL != time.Second {
		t.Errorf("TTL %v, %v; want 1s", r.negTTL, err)
	}
}
