package steps

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

// BenchmarkAssemble measures reassembly plus Arrow decoding of full steps (64 groups x 8 rollouts,
// default chunk size, and a 4 KiB chunk size that splits each step into many records); the
// reported rows/s is what one trainer core sustains.
func BenchmarkAssemble(b *testing.B) {
	for _, bc := range []struct {
		name  string
		chunk int
	}{{"default-chunks", topics.DefaultChunkBytes}, {"4KiB-chunks", smallChunk}} {
		b.Run(bc.name, func(b *testing.B) {
			const steps = 16
			var recs []*kgo.Record
			rowsPerStep := 0
			for s := int64(0); s < steps; s++ {
				rows := stepstest.StepRows("bench", s, 64, 8)
				rowsPerStep = len(rows)
				recs = append(recs, stepstest.ChunkRecords(b, names, rows, bc.chunk)...)
			}
			recs = stepstest.Placed(recs, 0, 0)
			var bytes int64
			for _, r := range recs {
				bytes += int64(len(r.Value))
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := NewAssembler(AssemblerConfig{})
				got := 0
				for _, r := range recs {
					steps, errs := a.Add(r)
					if len(errs) > 0 {
						b.Fatal(errs)
					}
					for _, st := range steps {
						got += len(st.Rows)
						a.Release(st)
					}
				}
				if got != steps*rowsPerStep {
					b.Fatalf("%d rows", got)
				}
			}
			b.ReportMetric(float64(b.N*steps*rowsPerStep)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// FuzzAssemblerAdd feeds arbitrary header values and payloads: the assembler must never panic,
// and every rejection must be a *RecordError naming the record.
func FuzzAssemblerAdd(f *testing.F) {
	recs := stepstest.ChunkRecords(f, names, stepstest.StepRows("a", 0, 4, 8), smallChunk)
	f.Add("a", "0", "0/3", "8", recs[0].Value)
	f.Add("a", "0", "2/3", "x", []byte("junk"))
	f.Add("", "-1", "1/1", "", []byte{})
	f.Fuzz(func(t *testing.T, run, step, chunk, rows string, value []byte) {
		a := NewAssembler(AssemblerConfig{})
		r := &kgo.Record{Topic: "t", Value: value, Headers: []kgo.RecordHeader{
			{Key: topics.HeaderRun, Value: []byte(run)}, {Key: topics.HeaderStep, Value: []byte(step)},
			{Key: topics.HeaderChunk, Value: []byte(chunk)}, {Key: topics.HeaderRows, Value: []byte(rows)},
		}}
		for i := 0; i < 2; i++ {
			r.Offset = int64(i)
			_, errs := a.Add(r)
			for _, err := range errs {
				if _, ok := err.(*RecordError); !ok {
					t.Fatalf("error %T %v is not a *RecordError", err, err)
				}
			}
		}
	})
}
