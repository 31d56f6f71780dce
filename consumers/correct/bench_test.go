package correct

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// BenchmarkEngine measures the consumer's CPU path without Kafka: decode, buffer, dedupe,
// seal (correction core) and row conversion, per input record.
func BenchmarkEngine(b *testing.B) {
	benchEngine(b, SynthConfig{Runs: 4, Steps: 20, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, Seed: 1})
}

// BenchmarkEngineLong is one run of `wmrl bench correction`'s workload (1000 steps), whose
// windows fill and slide, as the bench's do.
func BenchmarkEngineLong(b *testing.B) {
	benchEngine(b, SynthConfig{Runs: 1, Steps: 1000, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, FailEvery: 50, Seed: 1})
}

// BenchmarkEngineLongProtobuf is BenchmarkEngineLong with its input in Protobuf (docs/formats.md).
func BenchmarkEngineLongProtobuf(b *testing.B) {
	benchEngineFormat(b, SynthConfig{Runs: 1, Steps: 1000, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, FailEvery: 50, Seed: 1}, topics.FormatProtobuf)
}

func benchEngine(b *testing.B, wl SynthConfig) { benchEngineFormat(b, wl, topics.FormatJSON) }

func benchEngineFormat(b *testing.B, wl SynthConfig, f topics.Format) {
	in := testNames
	in.Format = f
	steps, err := Synthesize(in, wl)
	if err != nil {
		b.Fatal(err)
	}
	recs := flatten(steps)
	corr, _ := correction.New(correction.DefaultConfig())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, _ := newMetrics(nopRegisterer{})
		f := &feeder{e: newEngine(corr, testNames, 0, replayLimits(b, Limits{}), m), next: map[tp]int64{}, part: map[string]int32{}}
		for _, r := range recs {
			f.add(r)
		}
		if _, err := f.e.sealReady(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "records/s")
}

type nopRegisterer struct{}

func (nopRegisterer) Register(prometheus.Collector) error  { return nil }
func (nopRegisterer) MustRegister(...prometheus.Collector) {}
func (nopRegisterer) Unregister(prometheus.Collector) bool { return true }

// BenchmarkMetricsRecord is the per-input-record counter update (result buffered).
func BenchmarkMetricsRecord(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.record(kindPredicted, resultBuffered)
	}
}
