package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// ExecFunc is an in-process task: it executes the rollout and returns its
// score. It must honour ctx (return promptly once ctx is done); an error
// wrapping ErrInvalidArtifact marks the rollout itself as malformed.
type ExecFunc func(ctx context.Context, job Job) (float64, error)

// ErrInvalidArtifact is returned (wrapped) by an ExecFunc when the rollout
// cannot be executed because it is malformed; it maps to StatusInvalid.
var ErrInvalidArtifact = errors.New("sandbox: invalid artifact")

// BuiltinExecutor adapts an ExecFunc to Executor with the same result
// contract as CommandExecutor: timeout, error, invalid and range-checked
// scores. The demo's built-in task plugs in here.
type BuiltinExecutor struct {
	fn      ExecFunc
	timeout time.Duration
	rng     scoreRange
}

// BuiltinConfig configures a BuiltinExecutor. Zero fields take the defaults
// of CommandConfig (600 s timeout, scores in [0, 1]).
type BuiltinConfig struct {
	Timeout            time.Duration
	ScoreMin, ScoreMax float64
}

// NewBuiltinExecutor wraps fn.
func NewBuiltinExecutor(fn ExecFunc, cfg BuiltinConfig) (*BuiltinExecutor, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil ExecFunc", ErrConfig)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	rng, err := newScoreRange(cfg.ScoreMin, cfg.ScoreMax)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &BuiltinExecutor{fn: fn, timeout: cfg.Timeout, rng: rng}, nil
}

// Execute runs the function under the timeout. The function is waited for
// even past its deadline (it runs in this goroutine) so that a slot is never
// released while its work is still consuming CPU; a deadline that expired
// before it returned is reported as StatusTimeout whatever it returned.
func (b *BuiltinExecutor) Execute(ctx context.Context, job Job) (res Result) {
	start := time.Now()
	res.ExitCode = -1
	if err := ctx.Err(); err != nil {
		return Result{Status: StatusError, Reason: "canceled: " + context.Cause(ctx).Error(), ExitCode: -1, canceled: true}
	}
	jctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	defer func() {
		res.Duration = time.Since(start)
		if p := recover(); p != nil {
			res.Status, res.Reason, res.Score = StatusError, fmt.Sprintf("builtin task panicked: %v", p), 0
		}
	}()
	score, err := b.fn(jctx, job)
	switch {
	case ctx.Err() != nil:
		res.Status, res.Reason, res.canceled = StatusError, "canceled: "+context.Cause(ctx).Error(), true
	case jctx.Err() != nil:
		res.Status, res.Reason = StatusTimeout, fmt.Sprintf("builtin task exceeded timeout %s", b.timeout)
	case errors.Is(err, ErrInvalidArtifact):
		res.Status, res.Reason = StatusInvalid, err.Error()
	case err != nil:
		res.Status, res.Reason = StatusError, err.Error()
	default:
		if err := b.rng.check(score); err != nil {
			res.Status, res.Reason = StatusInvalid, err.Error()
		} else {
			res.Status, res.Score = StatusOK, score
		}
	}
	return res
}
