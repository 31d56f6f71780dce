package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBombStopsABoundedConsumer checks the bomb is what it claims: the broker accepts it, a
// consumer bounded below its size gets ErrDecompressTooLarge naming exactly its offsets, and the
// valid record written after it is reached by skipping to NextOffset.
func TestBombStopsABoundedConsumer(t *testing.T) {
	seeds := Kafka(t)
	topic := Topic(t, seeds, 1)
	Produce(t, seeds, []*kgo.Record{{Topic: topic, Value: []byte("before")}})
	const size = 64 << 20
	ref := Bomb(t, seeds, topic, 0, size)
	Produce(t, seeds, []*kgo.Record{{Topic: topic, Value: []byte("after")}})

	if ref.BaseOffset != 1 || ref.NextOffset != 1+int64(ref.Records) || ref.DecompressedBytes < size {
		t.Fatalf("bomb ref %+v: want base 1, next base+records, at least %d bytes", ref, size)
	}
	if ref.CompressedBytes > 1<<20 {
		t.Fatalf("bomb compresses to %d bytes, over the broker's default max.message.bytes", ref.CompressedBytes)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.MaxDecompressBatchBytes(8<<20),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	var tooLarge *kgo.ErrDecompressTooLarge
	for len(got) < 2 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if e, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
				tooLarge = e
				cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: e.Epoch, Offset: e.NextOffset}}})
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if tooLarge == nil || tooLarge.Offset != ref.BaseOffset || tooLarge.NextOffset != ref.NextOffset {
		t.Fatalf("ErrDecompressTooLarge %+v, want offsets [%d, %d)", tooLarge, ref.BaseOffset, ref.NextOffset)
	}
	if len(got) != 2 || got[0] != "before" || got[1] != "after" {
		t.Fatalf("records %q, want [before after]", got)
	}
}
