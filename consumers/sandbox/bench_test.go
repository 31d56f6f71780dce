package sandbox

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// BenchmarkPoolUtilization measures how much of the slots' time goes to jobs
// (target ≥ 0.95) with fixed 5 ms jobs, i.e. the pool's own scheduling
// overhead and idle gaps between a job ending and the next starting.
func BenchmarkPoolUtilization(b *testing.B) {
	const jobTime = 5 * time.Millisecond
	for _, slots := range []int{4, 16} {
		b.Run(fmt.Sprintf("S=%d", slots), func(b *testing.B) {
			exec, err := NewBuiltinExecutor(func(ctx context.Context, _ Job) (float64, error) {
				time.Sleep(jobTime)
				return 1, nil
			}, BuiltinConfig{Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			p, err := NewPool(exec, slots)
			if err != nil {
				b.Fatal(err)
			}
			jobs := make(chan Job, slots)
			out := make(chan Completed, slots)
			go func() {
				for range out {
				}
			}()
			b.ResetTimer()
			p.ResetStats()
			go func() {
				for i := 0; i < b.N; i++ {
					jobs <- Job{RolloutID: "r"}
				}
				close(jobs)
			}()
			if err := p.Run(context.Background(), jobs, out); err != nil {
				b.Fatal(err)
			}
			s := p.Stats()
			b.StopTimer()
			close(out)
			b.ReportMetric(s.Utilization, "util")
			b.ReportMetric(float64(s.Jobs)/s.Wall.Seconds(), "jobs/s")
		})
	}
}

// BenchmarkCommandExecutorSpawn is the per-job cost of the command executor
// for a trivial program: temp dir, artifact write, spawn, wait, group kill,
// cleanup — plain, with the prlimit wrapper, and inside bubblewrap.
func BenchmarkCommandExecutorSpawn(b *testing.B) {
	variants := []struct {
		name string
		cfg  CommandConfig
	}{
		{"plain", CommandConfig{Config: jail.Config{AllowWeakContainment: true, RunAs: stageRunAs()}}},
		{"prlimit", CommandConfig{Config: jail.Config{Limits: jail.DefaultLimits(), AllowWeakContainment: true, RunAs: stageRunAs()}}},
		{"prlimit+bwrap", CommandConfig{Config: jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true}}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			cfg := v.cfg
			cfg.Argv = []string{"/bin/echo", `{"score": 1}`}
			cfg.TempDir = b.TempDir()
			e, err := NewCommandExecutor(cfg)
			if err != nil {
				b.Skipf("%s unavailable: %v", v.name, err)
			}
			job := Job{RolloutID: "r", Artifact: []byte("print(1)\n")}
			b.ResetTimer()
			for b.Loop() {
				if r := e.Execute(context.Background(), job); r.Status != StatusOK {
					b.Fatalf("status %s: %s", r.Status, r.Reason)
				}
			}
		})
	}
}

// stageRunAs is jail.RunAs for "the job runs as the stage" (weak; nil when the
// stage is not root, whose jobs run as its uid without jail.RunAs).
func stageRunAs() *jail.RunAs {
	if os.Geteuid() != 0 {
		return nil
	}
	return &jail.RunAs{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
}
