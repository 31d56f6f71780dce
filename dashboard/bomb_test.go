package dashboard

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker, the follower meets a record batch that decompresses to 256 MiB between
// rollouts: it skips the batch unread, counts it and lists it on the page, counts the rollouts
// after it, and its peak memory stays inside the bound. The dashboard has no group, so a
// restarted follower meets the batch again and skips it again at the same bounded cost.
func TestFollowerSkipsDecompressionBomb(t *testing.T) {
	brokers := testenv.Kafka(t)
	names := testenv.Topics(t, brokers, 1)
	rec := func(v string) *kgo.Record {
		return &kgo.Record{Topic: names.Rollouts(), Key: []byte("r"), Value: []byte(v)}
	}
	testenv.Produce(t, brokers, []*kgo.Record{rec("1")})
	bomb := testenv.Bomb(t, brokers, names.Rollouts(), 0, 256<<20)
	testenv.Produce(t, brokers, []*kgo.Record{rec("2"), rec("3")})

	follow := func() State {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		f, err := NewFollower(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, TopicPrefix: names.Rollouts()[:len(names.Rollouts())-len("rollouts.v1")],
			PollInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		var st State
		for {
			st = f.Model().State()
			if rolloutsSeen(st, names.Rollouts()) >= 3 && st.SkippedBatches >= 1 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("follower state after a minute: %d rollouts, %d skipped batches, errors %q", rolloutsSeen(st, names.Rollouts()), st.SkippedBatches, st.Errors)
			case <-time.After(50 * time.Millisecond):
			}
		}
		time.Sleep(500 * time.Millisecond) // a record of the batch, were it read, would show meanwhile
		st = f.Model().State()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return st
	}

	for _, run := range []string{"first", "restarted"} {
		debug.FreeOSMemory()
		testenv.ResetPeakRSS(t)
		base := testenv.PeakRSS(t, 0)
		st := follow()
		peak := testenv.PeakRSS(t, 0)
		t.Logf("%s follower: peak RSS of the test process %d MiB (%d MiB before)", run, peak>>20, base>>20)
		if bound := int64(oversize.PeakFactor * topics.MaxBatchBytes(topics.MaxAdvantageBytes)); peak-base > bound && !raceEnabled { // the Makefile runs this test again without -race
			t.Errorf("%s follower: peak RSS grew by %d MiB, over the bound of %d MiB (oversize.PeakFactor × the limit)", run, (peak-base)>>20, bound>>20)
		}
		if n := rolloutsSeen(st, names.Rollouts()); n != 3 || st.SkippedBatches != 1 {
			t.Errorf("%s follower: %d rollouts, %d skipped batches; want 3 and 1", run, n, st.SkippedBatches)
		}
		want := "offsets 1.." // the batch's first offset, as the page lists it
		if bomb.BaseOffset != 1 || !strings.Contains(strings.Join(st.Errors, "\n"), want) {
			t.Errorf("%s follower: errors %q do not list the batch at offset %d", run, st.Errors, bomb.BaseOffset)
		}
	}
}

func rolloutsSeen(st State, topic string) int64 {
	for _, tr := range st.Topics {
		if tr.Topic == topic {
			return tr.Records
		}
	}
	return 0
}
