package trainer

import (
	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/topics"
)

// Step is one complete training step delivered by a Stream; Ack it once the trainer has
// consumed it.
type Step struct {
	Run  string
	Step int64
	// Rows are the step's advantage rows in canonical order (see steps.Step).
	Rows []topics.AdvantageRow
	// Records names the records the step arrived in, in chunk order.
	Records []steps.Pos

	asm     *steps.Step // what the assembler releases on Ack
	stream  *Stream
	acked   bool // guarded by stream.mu
	revoked bool // guarded by stream.mu
}

func newStep(st *steps.Step, s *Stream) *Step {
	return &Step{Run: st.Run, Step: st.Step, Rows: st.Rows, Records: st.Records, asm: st, stream: s}
}
