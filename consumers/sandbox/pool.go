package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// PoolOption configures a Pool.
type PoolOption func(*Pool)

// WithLogger sets the logger for executor panics (default slog.Default()).
func WithLogger(l *slog.Logger) PoolOption { return func(p *Pool) { p.log = l } }

// Pool runs jobs on a fixed number of exclusive slots: at most one job per
// slot at a time, because sandbox execution is the expensive, exclusive
// resource the anchor stream is budgeted by (README.md: executing every rollout is the bottleneck). Each job is told its
// slot (Job.Slot), so that an executor can give every slot a budget of its own
// (jail.Config.RunAsRange: a uid per slot).
type Pool struct {
	exec Executor
	// free holds the indices of the free slots.
	free chan int
	log  *slog.Logger
	// metrics are always updated; instrument registers them.
	metrics *poolMetrics
}

// slotLimited is an executor that can serve only so many slots (0: any).
type slotLimited interface{ MaxSlots() int }

// NewPool creates a pool of slots exclusive slots in front of exec.
func NewPool(exec Executor, slots int, opts ...PoolOption) (*Pool, error) {
	if exec == nil {
		return nil, fmt.Errorf("%w: nil executor", ErrConfig)
	}
	if slots < 1 {
		return nil, fmt.Errorf("%w: pool needs at least one slot, got %d", ErrConfig, slots)
	}
	if l, ok := exec.(slotLimited); ok && l.MaxSlots() > 0 && slots > l.MaxSlots() {
		return nil, fmt.Errorf("%w: %d slots, but the executor has a uid for %d (--run-as-range)", ErrConfig, slots, l.MaxSlots())
	}
	p := &Pool{exec: exec, free: make(chan int, slots), log: slog.Default(), metrics: newPoolMetrics(slots)}
	for i := range slots {
		p.free <- i
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Slots returns the number of slots.
func (p *Pool) Slots() int { return cap(p.free) }

// Submit waits for a free slot, runs job on it and returns its result. The
// error is non-nil only if ctx ended before a slot was free; the job was then
// not started. The slot is released on every path, including a panicking
// executor (reported as StatusError).
func (p *Pool) Submit(ctx context.Context, job Job) (res Result, err error) {
	select {
	case job.Slot = <-p.free:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("sandbox: waiting for a slot: %w", context.Cause(ctx))
	}
	p.metrics.busy.Inc()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("sandbox: executor panicked", "run", job.RunID, "rollout", job.RolloutID, "panic", r, "stack", string(debug.Stack()))
			res = Result{Status: StatusError, Reason: fmt.Sprintf("executor panic: %v", r), ExitCode: -1}
		}
		p.metrics.done(res, time.Since(start))
		p.metrics.busy.Dec()
		p.free <- job.Slot
	}()
	return p.exec.Execute(ctx, job), nil
}
