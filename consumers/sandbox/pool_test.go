package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// funcExecutor adapts a plain function for pool tests that need behaviour
// outside the Executor contract (panics, blocking).
type funcExecutor func(ctx context.Context, job Job) Result

func (f funcExecutor) Execute(ctx context.Context, job Job) Result { return f(ctx, job) }

// concurrency tracks how many executions overlap.
type concurrency struct {
	cur, peak atomic.Int64
}

func (c *concurrency) enter() {
	n := c.cur.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.cur.Add(-1) }

func TestPoolSlotsAreExclusive(t *testing.T) {
	for _, slots := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(slots), func(t *testing.T) {
			var c concurrency
			exec := funcExecutor(func(ctx context.Context, job Job) Result {
				c.enter()
				defer c.leave()
				time.Sleep(5 * time.Millisecond)
				return Result{Status: StatusOK, Score: 1}
			})
			var gaugePeak, gaugeLast atomic.Int64
			p, err := NewPool(exec, slots, WithBusyGauge(func(n int) {
				gaugeLast.Store(int64(n))
				if int64(n) > gaugePeak.Load() {
					gaugePeak.Store(int64(n))
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			const n = 40
			jobs := make(chan Job)
			out := make(chan Completed, n)
			go func() {
				for i := range n {
					jobs <- Job{RolloutID: fmt.Sprint(i)}
				}
				close(jobs)
			}()
			if err := p.Run(context.Background(), jobs, out); err != nil {
				t.Fatal(err)
			}
			close(out)
			seen := map[string]bool{}
			for c := range out {
				if seen[c.Job.RolloutID] {
					t.Errorf("job %s reported twice", c.Job.RolloutID)
				}
				seen[c.Job.RolloutID] = true
			}
			if len(seen) != n {
				t.Errorf("got %d results, want %d", len(seen), n)
			}
			if got := c.peak.Load(); got != int64(slots) {
				t.Errorf("peak concurrency %d, want exactly %d", got, slots)
			}
			if gaugePeak.Load() != int64(slots) || gaugeLast.Load() != 0 {
				t.Errorf("busy gauge peak %d last %d, want %d and 0", gaugePeak.Load(), gaugeLast.Load(), slots)
			}
			if s := p.Stats(); s.Busy != 0 || s.Jobs != n {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestPoolRecoversExecutorPanic(t *testing.T) {
	calls := 0
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		calls++
		if job.RolloutID == "bad" {
			panic("executor bug")
		}
		return Result{Status: StatusOK, Score: 0.5}
	})
	var done []Result
	p, err := NewPool(exec, 1, WithLogger(slog.New(slog.DiscardHandler)),
		WithJobDone(func(_ Job, r Result) { done = append(done, r) }))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Submit(context.Background(), Job{RolloutID: "bad"})
	if err != nil || r.Status != StatusError || r.Reason != "executor panic: executor bug" {
		t.Fatalf("panic result %+v err %v", r, err)
	}
	// The only slot must have been released for this to run at all.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err = p.Submit(ctx, Job{RolloutID: "good"})
	if err != nil || r.Status != StatusOK {
		t.Fatalf("after panic: %+v err %v", r, err)
	}
	if calls != 2 || len(done) != 2 || done[0].Status != StatusError {
		t.Errorf("calls %d, done hooks %+v", calls, done)
	}
	if s := p.Stats(); s.Busy != 0 {
		t.Errorf("busy %d after jobs", s.Busy)
	}
}

func TestPoolSubmitWaitsForSlot(t *testing.T) {
	release := make(chan struct{})
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		<-release
		return Result{Status: StatusOK}
	})
	p, _ := NewPool(exec, 1)
	first := make(chan Result)
	go func() {
		r, _ := p.Submit(context.Background(), Job{})
		first <- r
	}()
	for p.Stats().Busy != 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Submit(ctx, Job{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("submit on full pool: err %v, want deadline exceeded", err)
	}
	close(release)
	if r := <-first; r.Status != StatusOK {
		t.Errorf("first job %+v", r)
	}
}

func TestPoolRunCancel(t *testing.T) {
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		<-ctx.Done()
		return Result{Status: StatusError, Reason: "canceled", canceled: true}
	})
	p, _ := NewPool(exec, 2)
	jobs := make(chan Job, 5)
	for i := range 5 {
		jobs <- Job{RolloutID: fmt.Sprint(i)}
	}
	out := make(chan Completed, 5)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- p.Run(ctx, jobs, out) }()
	for p.Stats().Busy != 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Run err %v", err)
	}
	close(out)
	var got int
	for c := range out {
		got++
		if !c.Result.Canceled() {
			t.Errorf("job %s: %+v", c.Job.RolloutID, c.Result)
		}
	}
	// Exactly the two accepted jobs produced results; the rest stay queued.
	if got != 2 || len(jobs) != 3 {
		t.Errorf("results %d, still queued %d; want 2 and 3", got, len(jobs))
	}
}

func TestPoolUtilizationAccounting(t *testing.T) {
	gate := make(chan struct{})
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		<-gate
		return Result{Status: StatusOK}
	})
	p, _ := NewPool(exec, 2)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = p.Submit(context.Background(), Job{}) })
	for p.Stats().Busy != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	p.ResetStats()
	time.Sleep(100 * time.Millisecond)
	mid := p.Stats()
	close(gate)
	wg.Wait()
	end := p.Stats()
	// One of two slots busy through the whole window: utilization ≈ 0.5,
	// and the 50 ms before the reset must not count.
	for _, s := range []PoolStats{mid, end} {
		if s.Utilization < 0.45 || s.Utilization > 0.5+1e-9 {
			t.Errorf("utilization %.3f (busy %s wall %s), want ≈0.5", s.Utilization, s.BusyTime, s.Wall)
		}
		if s.BusyTime > s.Wall {
			t.Errorf("busy %s exceeds wall %s for a single job", s.BusyTime, s.Wall)
		}
	}
	if end.Jobs != 1 || end.Busy != 0 {
		t.Errorf("end stats %+v", end)
	}
}

func TestNewPoolErrors(t *testing.T) {
	if _, err := NewPool(nil, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("nil executor: %v", err)
	}
	if _, err := NewPool(funcExecutor(nil), 0); !errors.Is(err, ErrConfig) {
		t.Errorf("zero slots: %v", err)
	}
}
