package sandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// BenchmarkPoolUtilization measures how much of the slots' time goes to jobs
// (target ≥ 0.95) with fixed 5 ms jobs, i.e. the pool's own scheduling
// overhead and idle gaps between a job ending and the next starting. Busy
// time is read from wmrl_sandbox_slot_busy_seconds_total, the series the
// utilisation dashboard uses, with twice as many submitters as slots so that
// a job always waits.
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
			reg := prometheus.NewRegistry()
			if err := p.instrument(reg); err != nil {
				b.Fatal(err)
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 2 * slots {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if _, err := p.Submit(context.Background(), Job{RolloutID: "r"}); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
			wall := time.Since(start).Seconds()
			b.StopTimer()
			busy := value(b, reg, "wmrl_sandbox_slot_busy_seconds_total", "")
			b.ReportMetric(busy/(float64(slots)*wall), "util")
			b.ReportMetric(float64(b.N)/wall, "jobs/s")
		})
	}
}

// BenchmarkCommandExecutorSpawn is the per-job cost of the command executor
// for a trivial program: temp dir, artifact write, spawn, wait, group kill,
// cleanup — plain, with the prlimit wrapper, inside bubblewrap, and in two
// jailed steps (the run step's collector, then a grade step).
func BenchmarkCommandExecutorSpawn(b *testing.B) {
	variants := []struct {
		name string
		cfg  CommandConfig
	}{
		{"plain", CommandConfig{Config: jail.Config{AllowWeakContainment: true, RunAs: stageRunAs()}}},
		{"prlimit", CommandConfig{Config: jail.Config{Limits: jail.DefaultLimits(), AllowWeakContainment: true, RunAs: stageRunAs()}}},
		{"prlimit+bwrap", CommandConfig{Config: jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true}}},
		{"prlimit+bwrap,two-steps", CommandConfig{GradeArgv: []string{"/bin/echo", `{"score": 1}`}, Config: jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true}}},
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
