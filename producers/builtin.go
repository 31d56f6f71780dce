package producers

import (
	"context"
	"fmt"
	"io"
)

// BuiltinPolicy is an in-process policy, such as the demo's task policy. SampleStep returns the
// groups of one training step; it may block (e.g. until the previous step's advantages have
// updated the policy) and returns io.EOF to end the run early.
type BuiltinPolicy interface {
	SampleStep(ctx context.Context, step int64) ([]GroupSpec, error)
}

// PolicyVersioner is optionally implemented by a BuiltinPolicy to label the checkpoint that
// sampled a step.
type PolicyVersioner interface {
	PolicyVersion(step int64) string
}

// PolicyStepper is optionally implemented by a BuiltinPolicy that knows the training step of the
// checkpoint sampling each step (the manifest's policy_step, hence the rows' staleness).
type PolicyStepper interface {
	PolicyStep(step int64) int64
}

// Builtin is the Backend over a BuiltinPolicy: steps FirstStep, FirstStep+1, … for Steps steps
// (0 = until the policy returns io.EOF or ctx ends).
type Builtin struct {
	policy BuiltinPolicy
	next   int64
	end    int64 // exclusive; -1 = unbounded
}

// NewBuiltin returns the backend; steps < 0 or firstStep < 0 is an error.
func NewBuiltin(p BuiltinPolicy, firstStep, steps int64) (*Builtin, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil builtin policy", ErrConfig)
	}
	if firstStep < 0 || steps < 0 {
		return nil, fmt.Errorf("%w: first step %d and steps %d must be >= 0", ErrConfig, firstStep, steps)
	}
	end := int64(-1)
	if steps > 0 {
		end = firstStep + steps
	}
	return &Builtin{policy: p, next: firstStep, end: end}, nil
}

// Next implements Backend.
func (b *Builtin) Next(ctx context.Context) (StepBatch, error) {
	if b.end >= 0 && b.next >= b.end {
		return StepBatch{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return StepBatch{}, err
	}
	step := b.next
	groups, err := b.policy.SampleStep(ctx, step)
	if err != nil {
		return StepBatch{}, fmt.Errorf("builtin policy step %d: %w", step, err)
	}
	b.next++
	sb := StepBatch{Step: step, Groups: groups}
	if v, ok := b.policy.(PolicyVersioner); ok {
		sb.PolicyVersion = v.PolicyVersion(step)
	}
	if p, ok := b.policy.(PolicyStepper); ok {
		ps := p.PolicyStep(step)
		sb.PolicyStep = &ps
	}
	return sb, nil
}
