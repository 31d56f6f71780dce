package correct

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// BenchmarkRebuildFromChangelog1000 rebuilds 1,000 (run, stream) states with full 5,000-pair
// windows from a synthetic compacted changelog on the real broker (what a consumer reads on
// assignment: per stream its window chunks and its snapshot) and reports the time per rebuild
// and the heap the rebuilt states hold.
func BenchmarkRebuildFromChangelog1000(b *testing.B) {
	const streams = 1000
	seeds := testenv.Kafka(b)
	names := topics.NewNames(testenv.Name(b) + ".")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(names.Calibration()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	brokerTopics(b, seeds, names)
	ctx := context.Background()
	corr, err := correction.New(correction.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var bytes int
	for i := range streams {
		st := fullWindowState(b, corr, fmt.Sprintf("run-%d", i/10), fmt.Sprintf("stream%d", i%10))
		recs, err := calibrationRecords(names, sealedWhole(st), nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			bytes += len(r.Value)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	var heap int64
	b.ResetTimer()
	for b.Loop() {
		states, err := RebuildFromChangelog(ctx, opts, names, []int32{0}, 2*time.Minute, log)
		if err != nil {
			b.Fatal(err)
		}
		if len(states) != streams || states[0].Pairs() != correction.DefaultConfig().Window {
			b.Fatalf("rebuilt %d states", len(states))
		}
		b.StopTimer()
		var with, without runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&with)
		runtime.KeepAlive(states)
		states = nil
		runtime.GC()
		runtime.ReadMemStats(&without)
		heap = int64(with.HeapAlloc) - int64(without.HeapAlloc)
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/(1<<20), "MiB-held")
	b.ReportMetric(float64(bytes)/(1<<20), "MiB-changelog")
}

// fullWindowState is a state whose 5,000-pair window is full, reached in few steps of many
// anchor rollouts.
func fullWindowState(b *testing.B, corr *correction.Corrector, run, stream string) *correction.State {
	b.Helper()
	st := corr.NewState(run, stream)
	for v := range 6 {
		var groups []correction.Group
		for g := range 16 {
			grp := correction.Group{ID: fmt.Sprintf("g%d", g), Anchor: true}
			for k := range 64 {
				x := float64((v*131+g*17+k*7+len(run)+len(stream))%997) / 997
				grp.Rollouts = append(grp.Rollouts, correction.Rollout{ID: fmt.Sprintf("r%d", k),
					Predicted: correction.Reward{Score: x, OK: true}, Executed: correction.Reward{Score: x * x, OK: true}})
			}
			groups = append(groups, grp)
		}
		if _, err := corr.Advance(st, correction.Step{Run: run, Stream: stream, Step: int64(v), Groups: groups}, nil); err != nil {
			b.Fatal(err)
		}
	}
	return st
}
