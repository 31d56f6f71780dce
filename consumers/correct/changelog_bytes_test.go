package correct

import (
	"testing"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// BenchmarkChangelogBytesPerStep is the anatomy of the calibration records one sealed (run,
// stream) step writes on `wmrl bench correction`'s workload (one run of 1000 steps, 2 streams),
// before batching and compression: snapshot and window-chunk values, and their keys and headers.
// The bench's CalibrationBytesPerStep is the broker's log for the same records (with batch
// headers and transaction markers, after compression).
func BenchmarkChangelogBytesPerStep(b *testing.B) {
	wl := SynthConfig{Runs: 1, Steps: 1000, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, FailEvery: 50, Seed: 1}
	steps, err := Synthesize(testNames, wl)
	if err != nil {
		b.Fatal(err)
	}
	recs := flatten(steps)
	corr, _ := correction.New(correction.DefaultConfig())
	var snapValue, snapMeta, chunkValue, chunkMeta, chunkRecs, streamSteps float64
	for b.Loop() {
		m, _ := newMetrics(nopRegisterer{})
		f := &feeder{e: newEngine(corr, testNames, 0, replayLimits(b, Limits{}), m), next: map[tp]int64{}, part: map[string]int32{}}
		for _, r := range recs {
			f.add(r)
		}
		out, err := f.e.sealReady()
		if err != nil {
			b.Fatal(err)
		}
		snapValue, snapMeta, chunkValue, chunkMeta, chunkRecs, streamSteps = 0, 0, 0, 0, 0, 0
		for _, s := range out {
			cal, err := calibrationRecords(testNames, s, nil)
			if err != nil {
				b.Fatal(err)
			}
			streamSteps += float64(len(s.snaps))
			for _, r := range cal {
				meta := len(r.Key)
				for _, h := range r.Headers {
					meta += len(h.Key) + len(h.Value)
				}
				schema, _ := topics.HeaderValue(r.Headers, topics.HeaderSchema)
				if schema == topics.SchemaCalibration {
					snapValue, snapMeta = snapValue+float64(len(r.Value)), snapMeta+float64(meta)
				} else {
					chunkValue, chunkMeta, chunkRecs = chunkValue+float64(len(r.Value)), chunkMeta+float64(meta), chunkRecs+1
				}
			}
		}
	}
	b.ReportMetric(snapValue/streamSteps, "snapshot-value-B/step")
	b.ReportMetric(snapMeta/streamSteps, "snapshot-key+headers-B/step")
	b.ReportMetric(chunkValue/streamSteps, "chunk-value-B/step")
	b.ReportMetric(chunkMeta/streamSteps, "chunk-key+headers-B/step")
	b.ReportMetric(chunkRecs/streamSteps, "chunk-records/step")
}
