package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// Every result label moves its counter and histogram, the busy gauge follows
// a running job, and busy seconds add up the slot time.
func TestPoolMetrics(t *testing.T) {
	release := make(chan struct{})
	results := map[string]Result{
		"ok":       {Status: StatusOK, Score: 1},
		"timeout":  {Status: StatusTimeout},
		"error":    {Status: StatusError, ExitCode: 3},
		"invalid":  {Status: StatusInvalid},
		"oom":      {Status: StatusError, oom: true},
		"canceled": {Status: StatusError, canceled: true},
	}
	p, err := NewPool(funcExecutor(func(_ context.Context, j Job) Result {
		if j.RolloutID == "block" {
			<-release
			return Result{Status: StatusOK}
		}
		time.Sleep(20 * time.Millisecond)
		return results[j.RolloutID]
	}), 3)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := p.instrument(reg); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "wmrl_sandbox_slots", ""); got != 3 {
		t.Errorf("wmrl_sandbox_slots = %v, want 3", got)
	}
	began := time.Now()
	for label := range results {
		if _, err := p.Submit(context.Background(), Job{RolloutID: label}); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(began).Seconds()
	for label := range results {
		if got := value(t, reg, "wmrl_sandbox_jobs_total", label); got != 1 {
			t.Errorf("wmrl_sandbox_jobs_total{result=%q} = %v, want 1", label, got)
		}
		h := lookup(t, reg, "wmrl_sandbox_job_duration_seconds", label)
		count, sum := h.count, h.sum
		if count != 1 || sum < 0.02 {
			t.Errorf("duration{result=%q}: count %d sum %v, want 1 sample ≥ 20ms", label, count, sum)
		}
	}
	// The jobs ran one after another: their busy time cannot exceed the wall time.
	if got := value(t, reg, "wmrl_sandbox_slot_busy_seconds_total", ""); got < 6*0.02 || got > elapsed {
		t.Errorf("wmrl_sandbox_slot_busy_seconds_total = %v, want in [0.12, %v]", got, elapsed)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Submit(context.Background(), Job{RolloutID: "block"})
	}()
	if !eventuallyTrue(func() bool { return value(t, reg, "wmrl_sandbox_slots_busy", "") == 1 }) {
		t.Errorf("wmrl_sandbox_slots_busy = %v while a job runs, want 1", value(t, reg, "wmrl_sandbox_slots_busy", ""))
	}
	close(release)
	<-done
	if got := value(t, reg, "wmrl_sandbox_slots_busy", ""); got != 0 {
		t.Errorf("wmrl_sandbox_slots_busy = %v after the job, want 0", got)
	}
	if n := seriesCount(t, reg, "wmrl_sandbox_"); n != 6+6+1+1+1 {
		t.Errorf("gathered %d wmrl_sandbox_ series, want 15", n)
	}
}

// found is one gathered series.
type found struct {
	value   float64
	count   uint64
	sum     float64
	present bool
}

// lookup finds the series of name with result=label (label "" for a series
// without labels) in reg.
func lookup(t testing.TB, reg *prometheus.Registry, name, label string) found {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					got = l.GetValue()
				}
			}
			if got != label {
				continue
			}
			return found{
				value: m.GetCounter().GetValue() + m.GetGauge().GetValue(),
				count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum(), present: true,
			}
		}
	}
	return found{}
}

func value(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	f := lookup(t, reg, name, label)
	if !f.present {
		t.Fatalf("no series %s{result=%q}", name, label)
	}
	return f.value
}

// seriesCount counts the gathered series whose name starts with prefix.
func seriesCount(t *testing.T, reg *prometheus.Registry, prefix string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), prefix) {
			n += len(f.GetMetric())
		}
	}
	return n
}

func eventuallyTrue(cond func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// NewStage serves the pool's series on the stage's registry.
func TestNewStageRegistersPoolMetrics(t *testing.T) {
	p, err := NewPool(funcExecutor(func(context.Context, Job) Result { return Result{Status: StatusOK} }), 2)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	st, err := NewStage(stage.Config{Names: topics.NewNames(""), Registry: reg}, HandlerConfig{Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Client().Close()
	if n := seriesCount(t, reg, "wmrl_sandbox_"); n != 3 {
		t.Fatalf("%d wmrl_sandbox_ series on the stage registry before any job, want 3 (slots, busy, busy seconds)", n)
	}
	if got := value(t, reg, "wmrl_sandbox_slots", ""); got != 2 {
		t.Errorf("wmrl_sandbox_slots = %v, want 2", got)
	}
}
