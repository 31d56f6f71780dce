package sandbox

import (
	"context"
	"testing"
	"time"
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
	jobs := make(chan Job)
	out := make(chan Completed, len(want))
	go func() {
		for b := range want {
			j := job(b)
			j.RolloutID = "r-" + b
			jobs <- j
		}
		close(jobs)
	}()
	if err := p.Run(context.Background(), jobs, out); err != nil {
		t.Fatal(err)
	}
	close(out)
	n := 0
	for c := range out {
		n++
		b := string(c.Job.Artifact)
		if c.Result.Status != want[b] || c.Job.RolloutID != "r-"+b {
			t.Errorf("%s: %s %q, want %s", c.Job.RolloutID, c.Result.Status, c.Result.Reason, want[b])
		}
	}
	if n != len(want) {
		t.Errorf("%d results for %d jobs", n, len(want))
	}
	if s := p.Stats(); s.Busy != 0 || s.Jobs != uint64(len(want)) {
		t.Errorf("stats %+v", s)
	}
	assertNoLeftovers(t, marker)
	assertEmptyDir(t, e.Config().TempDir)
}
