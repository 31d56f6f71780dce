package topicread

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker, a bounded read (replays, digests, state rebuilds) meets a batch that
// decompresses to 256 MiB: it skips the batch unread, reports it, hands every record around it
// to fn, ends at the end even when the batch is the last thing before it, and its peak memory
// stays inside the bound. A reporting function that refuses ends the read with its error.
func TestToEndSkipsDecompressionBomb(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	rec := func(v string) *kgo.Record { return &kgo.Record{Topic: topic, Value: []byte(v)} }
	testenv.Produce(t, brokers, []*kgo.Record{rec("a")})
	first := testenv.Bomb(t, brokers, topic, 0, 256<<20)
	testenv.Produce(t, brokers, []*kgo.Record{rec("b"), rec("c")})
	last := testenv.Bomb(t, brokers, topic, 0, 256<<20) // the end of the read
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}

	debug.FreeOSMemory()
	testenv.ResetPeakRSS(t)
	base := testenv.PeakRSS(t, 0)
	var got []string
	var refs []topics.BatchRef
	err := ToEnd(ctx, opts, start, time.Second, nil, func(r *kgo.Record) error {
		got = append(got, string(r.Value))
		return nil
	}, OnBatchTooLarge(func(ref topics.BatchRef) error { refs = append(refs, ref); return nil }))
	peak := testenv.PeakRSS(t, 0)
	if err != nil {
		t.Fatalf("ToEnd: %v", err)
	}
	t.Logf("peak RSS of the test process during the read: %d MiB (%d MiB before)", peak>>20, base>>20)
	if bound := int64(oversize.PeakFactor * DefaultMaxBatchBytes); peak-base > bound && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("peak RSS grew by %d MiB, over the bound of %d MiB", (peak-base)>>20, bound>>20)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("records %q, want [a b c]", got)
	}
	if len(refs) != 2 || refs[0].Offset != first.BaseOffset || refs[0].NextOffset != first.NextOffset ||
		refs[1].Offset != last.BaseOffset || refs[1].NextOffset != last.NextOffset || refs[0].Limit != DefaultMaxBatchBytes {
		t.Errorf("reported batches %+v, want [%d, %d) and [%d, %d) at limit %d", refs, first.BaseOffset, first.NextOffset, last.BaseOffset, last.NextOffset, DefaultMaxBatchBytes)
	}

	stop := errors.New("refused by the caller")
	err = ToEnd(ctx, opts, start, time.Second, nil, func(*kgo.Record) error { return nil },
		OnBatchTooLarge(func(topics.BatchRef) error { return stop }))
	if !errors.Is(err, stop) {
		t.Errorf("ToEnd with a refusing reporter: %v, want %v", err, stop)
	}
}
