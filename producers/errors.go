package producers

import "errors"

// The package's sentinel errors, in one place: every error a caller can branch on with errors.Is.
var (
	// ErrLine is wrapped by every JSONL input error; the message starts with "line N:".
	ErrLine = errors.New("bad JSONL line")

	// ErrConfig reports an unusable generator or backend configuration.
	ErrConfig = errors.New("producers: invalid config")

	// ErrBadBatch reports a step batch that cannot be published (duplicate ids, empty groups, an
	// earlier step than the last one); the generator stops rather than publish a broken step.
	ErrBadBatch = errors.New("producers: bad step batch")

	// ErrBadInput is the DLQ reason ("bad-input") of input the generator skipped (DeadLetterInput).
	ErrBadInput = errors.New("bad input")

	// ErrNoSteps: Generator.EndRun before any step was published names no last step.
	ErrNoSteps = errors.New("producers: no step published, so no end of run to publish")

	// ErrPolicyServer reports a policy-server request that failed for good (a non-retryable status,
	// or retries exhausted); the generator stops, because a step with missing rollouts must not be
	// published.
	ErrPolicyServer = errors.New("producers: policy server request failed")
)
