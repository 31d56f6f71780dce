package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The embedded bench runs every round and judges the median ratio: a target no run can reach
// fails with exit code 1 naming the median, and the summary lists each round.
func TestBenchCorrectionRoundsEmbedded(t *testing.T) {
	var out bytes.Buffer
	a := &app{stdout: &out, stderr: &out}
	root := newRoot(a)
	root.SetArgs([]string{"bench", "correction", "--embedded", "--runs=1", "--steps=12", "--streams=1",
		"--latency-steps=2", "--rounds=2", "--target=1000", "--log-level=error"})
	err := root.Execute()
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "median ratio") {
		t.Fatalf("want exit 1 for the median ratio below target, got %v\n%s", err, out.String())
	}
	for _, s := range []string{"2 alternating rounds", "ratio                  min", "latency last reward",
		"records per CPU-second", "broker log bytes per run step, backlog (one replica): advantages.v1=",
		"broker log bytes per run step, one step per transaction", "CPU per step when each step"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if n := strings.Count(out.String(), "\n1 "); n != 1 {
		t.Errorf("round 1 listed %d times:\n%s", n, out.String())
	}
}
