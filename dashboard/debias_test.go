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
