package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkStage measures slot utilization of the sandbox consumer end to end (kfake, stage
// runtime, Handler, Pool) with fixed 20 ms jobs (target ≥ 0.95). handlers=S holds a slot's
// handler through the produce acknowledgement; handlers=2S is NewStage's default.
// b.N scales the jobs per run (b.N × 4S).
func BenchmarkSandboxStage(b *testing.B) {
	for _, slots := range []int{4, 16} {
		for _, handlers := range []int{slots, 2 * slots} {
			b.Run(fmt.Sprintf("S=%d/handlers=%d", slots, handlers), func(b *testing.B) {
				rep, err := Sandbox(context.Background(), SandboxConfig{Slots: slots, JobTime: 20 * time.Millisecond, StageLoad: StageLoad{StageConcurrency: handlers, Records: b.N * 4 * slots}})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(rep.Utilization, "util")
				b.ReportMetric(rep.JobsPerSec, "jobs/s")
				b.ReportMetric(rep.IdealPerSec, "ideal_jobs/s")
				b.ReportMetric(float64(rep.MeanJob.Microseconds())/1000, "job_ms")
			})
		}
	}
}

func TestSandboxSmoke(t *testing.T) {
	rep, err := Sandbox(context.Background(), SandboxConfig{Slots: 2, JobTime: time.Millisecond, StageLoad: StageLoad{Records: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 20 || rep.Utilization <= 0 || rep.Utilization > 1.05 {
		t.Fatalf("report %+v", rep)
	}
}
