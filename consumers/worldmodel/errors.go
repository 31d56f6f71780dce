package worldmodel

import "errors"

// The package's sentinel errors, in one place: every error a caller can branch on with errors.Is.
var (
	// ErrNoScore reports that a world model's reply holds no usable score. The scorer turns it into
	// a StatusInvalid result: the model answered, but not with something we can train on.
	ErrNoScore = errors.New("worldmodel: no usable score in reply")

	// ErrUnreachable is wrapped by Probe's errors: the world model cannot be used as configured.
	ErrUnreachable = errors.New("world model unusable")

	// ErrInvalidConfig reports a configuration that cannot work; constructors wrap it.
	ErrInvalidConfig = errors.New("worldmodel: invalid config")

	// ErrScoringFailed is wrapped by the stage.Failed error the handler returns with the failure
	// record of a rollout it could not score.
	ErrScoringFailed = errors.New("scoring failed")
)
