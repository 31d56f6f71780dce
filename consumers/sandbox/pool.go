package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Completed pairs a job with its result, because results of concurrent
// slots arrive out of order.
type Completed struct {
	Job    Job
	Result Result
}

// PoolOption configures a Pool.
type PoolOption func(*Pool)

// WithBusyGauge registers f, called with the number of busy slots every time
// it changes (e.g. to set a Prometheus gauge). f must be cheap and must not
// call back into the pool.
func WithBusyGauge(f func(busy int)) PoolOption { return func(p *Pool) { p.onBusy = f } }

// WithJobDone registers f, called after every job (e.g. to observe a
// duration histogram labelled by status).
func WithJobDone(f func(Job, Result)) PoolOption { return func(p *Pool) { p.onDone = f } }

// WithLogger sets the logger for executor panics (default slog.Default()).
func WithLogger(l *slog.Logger) PoolOption { return func(p *Pool) { p.log = l } }

// Pool runs jobs on a fixed number of exclusive slots: at most one job per
// slot at a time, because sandbox execution is the expensive, exclusive
// resource the anchor stream is budgeted by (DESIGN §1).
type Pool struct {
	exec   Executor
	slots  chan struct{}
	onBusy func(int)
	onDone func(Job, Result)
	log    *slog.Logger
	// metrics, once set by instrument, are updated under mu.
	metrics *poolMetrics

	// Times are nanoseconds since base; epoch starts the stats window.
	mu        sync.Mutex
	base      time.Time
	epoch     int64
	busy      int
	busyNanos int64 // busy time of finished jobs inside the window
	startSum  int64 // Σ max(start, epoch) over in-flight jobs
	jobs      uint64
}

// NewPool creates a pool of slots exclusive slots in front of exec.
func NewPool(exec Executor, slots int, opts ...PoolOption) (*Pool, error) {
	if exec == nil {
		return nil, fmt.Errorf("%w: nil executor", ErrConfig)
	}
	if slots < 1 {
		return nil, fmt.Errorf("%w: pool needs at least one slot, got %d", ErrConfig, slots)
	}
	p := &Pool{exec: exec, slots: make(chan struct{}, slots), log: slog.Default(), base: time.Now()}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Slots returns the number of slots.
func (p *Pool) Slots() int { return cap(p.slots) }

// Submit waits for a free slot, runs job on it and returns its result. The
// error is non-nil only if ctx ended before a slot was free; the job was then
// not started.
func (p *Pool) Submit(ctx context.Context, job Job) (Result, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("sandbox: waiting for a slot: %w", context.Cause(ctx))
	}
	return p.runOnSlot(ctx, job), nil
}

// Run executes jobs until the channel is closed or ctx ends, sending one
// Completed per accepted job to out. A job is received only when a slot is
// free, so an unread jobs channel is natural backpressure. Run returns after
// every accepted job's result was sent (the caller must keep reading out,
// also after canceling ctx); it does not close out. The error is ctx's cause
// if ctx ended, else nil.
func (p *Pool) Run(ctx context.Context, jobs <-chan Job, out chan<- Completed) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		var job Job
		var ok bool
		select {
		case job, ok = <-jobs:
		case <-ctx.Done():
			<-p.slots
			return context.Cause(ctx)
		}
		if !ok {
			<-p.slots
			return nil
		}
		wg.Go(func() {
			out <- Completed{Job: job, Result: p.runOnSlot(ctx, job)}
		})
	}
}

// runOnSlot runs job on an already acquired slot and releases it on every
// path, including a panicking executor (reported as StatusError).
func (p *Pool) runOnSlot(ctx context.Context, job Job) (res Result) {
	start := p.acquired()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("sandbox: executor panicked", "run", job.RunID, "rollout", job.RolloutID, "panic", r, "stack", string(debug.Stack()))
			res = Result{Status: StatusError, Reason: fmt.Sprintf("executor panic: %v", r), ExitCode: -1}
		}
		p.released(start, res)
		<-p.slots
		if p.onDone != nil {
			p.onDone(job, res)
		}
	}()
	return p.exec.Execute(ctx, job)
}

func (p *Pool) acquired() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := int64(time.Since(p.base))
	p.busy++
	p.startSum += now
	if p.onBusy != nil {
		p.onBusy(p.busy)
	}
	if p.metrics != nil {
		p.metrics.busy.Set(float64(p.busy))
	}
	return now
}

func (p *Pool) released(start int64, res Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := int64(time.Since(p.base))
	held := time.Duration(now - start)
	start = max(start, p.epoch)
	p.busy--
	p.startSum -= start
	p.busyNanos += now - start
	p.jobs++
	if p.onBusy != nil {
		p.onBusy(p.busy)
	}
	if p.metrics != nil {
		p.metrics.busy.Set(float64(p.busy))
		p.metrics.done(res, held)
	}
}

// PoolStats is the pool's utilization accounting since creation or the last
// ResetStats.
type PoolStats struct {
	Slots int
	Busy  int    // slots busy right now
	Jobs  uint64 // jobs finished in the window
	// BusyTime is the summed slot-busy time in the window, including the
	// elapsed part of jobs still running.
	BusyTime time.Duration
	Wall     time.Duration
	// Utilization is BusyTime / (Slots × Wall), in [0, 1].
	Utilization float64
}

// Stats returns the utilization accounting.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := int64(time.Since(p.base))
	busy := p.busyNanos + int64(p.busy)*now - p.startSum
	wall := now - p.epoch
	s := PoolStats{
		Slots:    cap(p.slots),
		Busy:     p.busy,
		Jobs:     p.jobs,
		BusyTime: time.Duration(busy),
		Wall:     time.Duration(wall),
	}
	if wall > 0 {
		s.Utilization = float64(busy) / (float64(s.Slots) * float64(wall))
	}
	return s
}

// ResetStats starts a new accounting window now; jobs in flight count only
// their time inside the new window.
func (p *Pool) ResetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = int64(time.Since(p.base))
	p.busyNanos, p.jobs = 0, 0
	p.startSum = int64(p.busy) * p.epoch
}
