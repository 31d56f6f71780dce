package dashboard

import "math"

// Headline is a finished demo's result (State.Headline): what `wmrl demo` prints at the end, so
// the page a demo leaves up says how the run came out, not only how its pipeline ran.
type Headline struct {
	// Line is the demo's final line (speedup to the target and final scores).
	Line string        `json:"line"`
	Arms []HeadlineArm `json:"arms"`
}

// HeadlineArm is one arm of a finished demo; a null field was not reached or not defined (an
// arm that never reached the target has no executions-to-target, pure-wm no speedup).
type HeadlineArm struct {
	Arm                string   `json:"arm"`
	FinalScore         *float64 `json:"final_score"`
	Executions         *float64 `json:"executions"`
	ExecutionsToTarget *float64 `json:"executions_to_target"`
	Speedup            *float64 `json:"speedup"`
}

// NewHeadlineArm is one arm's result as the page shows it: a NaN or infinite value (not reached,
// not defined) becomes null.
func NewHeadlineArm(arm string, final, executions, executionsToTarget, speedup float64) HeadlineArm {
	return HeadlineArm{Arm: arm, FinalScore: finite(final), Executions: finite(executions),
		ExecutionsToTarget: finite(executionsToTarget), Speedup: finite(speedup)}
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// SetHeadline shows a finished demo's result at the top of the page.
func (m *Model) SetHeadline(h Headline) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.headline = &h
	m.bump()
}

// SetHeadline shows a finished demo's result at the top of the server's page.
func (s *Server) SetHeadline(h Headline) { s.model.SetHeadline(h) }
