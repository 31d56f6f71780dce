package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkStage measures the world-model consumer end to end (kfake, stage runtime, Handler,
// OpenAIScorer) against a 20 ms mock at concurrency C: busy_frac is the share of C kept in
// flight (target ≥ 0.95), eff is records/s over the ideal C/latency. handlers=C holds a scoring
// slot through the produce acknowledgement, handlers=2C (NewStage's default) does not.
// b.N scales the records scored per run (b.N × 4C).
func BenchmarkWorldModelStage(b *testing.B) {
	for _, conc := range []int{8, 32} {
		for _, handlers := range []int{conc, 2 * conc} {
			b.Run(fmt.Sprintf("C=%d/handlers=%d", conc, handlers), func(b *testing.B) {
				rep, err := WorldModel(context.Background(), WorldModelConfig{
					Concurrency: conc, Latency: 20 * time.Millisecond, StageLoad: StageLoad{StageConcurrency: handlers, Records: b.N * 4 * conc},
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(rep.BusyFraction, "busy_frac")
				b.ReportMetric(rep.SlotFraction, "slot_frac")
				b.ReportMetric(rep.RecordsPerSec, "rec/s")
				b.ReportMetric(rep.IdealPerSec, "ideal_rec/s")
				b.ReportMetric(rep.Efficiency, "eff")
				b.ReportMetric(float64(rep.ServerLatency.Microseconds())/1000, "srv_ms/req")
			})
		}
	}
}

// TestBenchmarkSmoke keeps Benchmark working without timing anything: every record must come
// back and the busy fraction must be a fraction.
func TestWorldModelSmoke(t *testing.T) {
	rep, err := WorldModel(context.Background(), WorldModelConfig{Concurrency: 4, Latency: time.Millisecond, StageLoad: StageLoad{Records: 40}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 40 || rep.BusyFraction <= 0 || rep.BusyFraction > 1.05 || rep.Wall <= 0 {
		t.Fatalf("report %+v", rep)
	}
}
