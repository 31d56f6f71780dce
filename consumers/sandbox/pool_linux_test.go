package sandbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Real subprocesses through the pool: every job ends with the right status,
// every slot is released and nothing is left running.
func TestPoolWithCommandExecutor(t *testing.T) {
	_, marker := markerEnv(t)
	timeout := 400 * time.Millisecond
	if raceEnabled {
		timeout = 3 * time.Second // instrumented helpers start slowly
	}
	e := helperExec(t, marker, func(c *CommandConfig) { c.Timeout = timeout })
	want := map[string]Status{
		"good": StatusOK, "garbage": StatusInvalid, "range": StatusInvalid, "fail": StatusError,
		"sleep": StatusTimeout, "spin": StatusTimeout, "fork": StatusOK, "fork-sleep": StatusTimeout, "selfkill": StatusError,
	}
	p, err := NewPool(e, 3)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := p.instrument(reg); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for b, st := range want {
		wg.Go(func() {
			j := job(b)
			j.RolloutID = "r-" + b
			r, err := p.Submit(context.Background(), j)
			if err != nil || r.Status != st {
				t.Errorf("%s: %s %q (err %v), want %s", j.RolloutID, r.Status, r.Reason, err, st)
			}
		})
	}
	wg.Wait()
	var jobs float64
	for _, l := range []string{"ok", "timeout", "error", "oom", "invalid", "canceled"} {
		jobs += lookup(t, reg, "wmrl_sandbox_jobs_total", l).value
	}
	if jobs != float64(len(want)) {
		t.Errorf("wmrl_sandbox_jobs_total sums to %v for %d jobs", jobs, len(want))
	}
	if got := value(t, reg, "wmrl_sandbox_slots_busy", ""); got != 0 {
		t.Errorf("wmrl_sandbox_slots_busy = %v after the jobs, want 0", got)
	}
	assertNoLeftovers(t, marker)
	assertEmptyDir(t, e.Config().TempDir)
}
