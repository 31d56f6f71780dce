package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PoisonBytes is the size of the poison records the hostile-input tests write: ten times the
// broker's default max.message.bytes, yet accepted by it once compressed.
const PoisonBytes = 10 << 20

// PoisonJSON returns a JSON object of about n bytes: fields (a JSON object body such as
// `"schema":"wmrl.rollout.v1","run_id":"r"`, may be empty) followed by a "pad" string field of
// repeated characters. It compresses to a few kilobytes, so a producer with compression gets it
// past the broker's 1 MiB limit, which applies to the compressed batch: the shape of a poison
// record that once stalled stages.
func PoisonJSON(fields string, n int) []byte {
	var b strings.Builder
	b.Grow(n + len(fields) + 16)
	b.WriteString("{")
	if fields != "" {
		b.WriteString(fields)
		b.WriteString(",")
	}
	b.WriteString(`"pad":"`)
	b.WriteString(strings.Repeat("x", max(n-len(fields)-12, 0)))
	b.WriteString(`"}`)
	return []byte(b.String())
}

// Produce writes copies of recs (a record can be produced once: the copies let a test write the
// same records again), keyed as they are: the default partitioner places them.
func Produce(t testing.TB, seeds []string, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, cp...).FirstErr(); err != nil {
		t.Fatalf("produce %d records: %v", len(cp), err)
	}
}

// ProduceCompressed writes recs in order with zstd compression and a client batch limit above
// PoisonBytes, so records far over 1 MiB reach the broker (which checks the compressed size).
func ProduceCompressed(t testing.TB, seeds []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.ProducerBatchMaxBytes(2*PoisonBytes),
		kgo.MaxBufferedBytes(8*PoisonBytes),
		kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range recs {
		// One at a time: a batch of several poison records could exceed the broker limit even
		// compressed, and input order matters to the tests.
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d bytes to %s: %v", len(r.Value), r.Topic, err)
		}
	}
}
