package task

import "errors"

// The package's sentinel errors, in one place: every error a caller can branch on with errors.Is.
var (
	// ErrInvalidKind is returned for an unknown Kind.
	ErrInvalidKind = errors.New("task: invalid kind")

	// ErrInvalidConfig is wrapped by WorldModelConfig validation errors.
	ErrInvalidConfig = errors.New("task: invalid world model config")

	// errDiverged marks a fit whose parameters became non-finite. It is not
	// returned to callers: a diverged experiment is a valid experiment that
	// scores 0, just as NaN losses do in real research code.
	errDiverged = errors.New("task: fit diverged")

	// ErrInvalidUpdate is wrapped by Policy.Update argument errors.
	ErrInvalidUpdate = errors.New("task: invalid policy update")

	// ErrInvalidSolution is wrapped by every Solution validation or decoding
	// error.
	ErrInvalidSolution = errors.New("task: invalid solution")

	// ErrNoProblem is returned when Execute gets a nil problem or Predict a zero
	// TrainView.
	ErrNoProblem = errors.New("task: no problem")
)
