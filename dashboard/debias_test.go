package dashboard

import (
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// TestModelDebiasShift: the step view carries the snapshot's debias effect, and null for a
// snapshot written before it existed.
func TestModelDebiasShift(t *testing.T) {
	m := NewModel("p.", 10)
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 0, AnchorWeight: 1}, time.Unix(1, 0))
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 1, AnchorWeight: 1,
		Debias: &topics.DebiasShift{Rows: 12, Groups: 4, Reordered: 1, MeanShift: 0.25}}, time.Unix(2, 0))
	steps := m.State().Runs[0].Steps
	if len(steps) != 2 || steps[0].DebiasShift != nil || steps[0].DebiasReordered != nil {
		t.Fatalf("step 0 without a debias effect: %+v", steps)
	}
	if s := steps[1]; s.DebiasShift == nil || *s.DebiasShift != 0.25 || s.DebiasReordered == nil || *s.DebiasReordered != 0.25 {
		t.Fatalf("step 1: shift %v reordered %v, want 0.25 and 0.25", s.DebiasShift, s.DebiasReordered)
	}
}

// TestModelTrustGate: the step view carries the snapshot's trust gate (null without it), and the
// run says since which step the world model is gated off while the newest step's gate is closed.
func TestModelTrustGate(t *testing.T) {
	m := NewModel("p.", 10)
	snap := func(step int64, g *topics.TrustGate) {
		m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: step, AnchorWeight: 1, Gate: g},
			time.Unix(step+1, 0))
	}
	open := &topics.TrustGate{Pairs: 40, Rho: 0.6, Lo: 0.36, Hi: 0.77}
	closed := &topics.TrustGate{Closed: true, Pairs: 60, Rho: 0.02, Lo: -0.23, Hi: 0.27}
	snap(0, nil)
	snap(1, open)
	snap(2, closed)
	run := m.State().Runs[0]
	if run.Steps[0].Gate != nil || *run.Steps[1].Gate != *open || run.GatedSince == nil || *run.GatedSince != 2 {
		t.Fatalf("steps %+v, gated since %v; want step 0 without a gate and gated since 2", run.Steps, run.GatedSince)
	}
	snap(3, closed)
	if g := m.State().Runs[0].GatedSince; g == nil || *g != 2 {
		t.Fatalf("gated since %v after another closed step, want 2", g)
	}
	snap(4, open)
	if g := m.State().Runs[0].GatedSince; g != nil {
		t.Fatalf("gated since %v with the newest gate open, want null", *g)
	}
}
