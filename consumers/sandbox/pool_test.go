package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// Slots are exclusive: never more jobs overlap than there are slots, every
// submitted job reports once, and the busy gauge returns to zero.
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
			p, err := NewPool(exec, slots)
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			if err := p.instrument(reg); err != nil {
				t.Fatal(err)
			}
			const n = 40
			var wg sync.WaitGroup
			var ok atomic.Int64
			for i := range n {
				wg.Go(func() {
					r, err := p.Submit(context.Background(), Job{RolloutID: fmt.Sprint(i)})
					if err != nil || r.Status != StatusOK {
						t.Errorf("job %d: %+v, %v", i, r, err)
						return
					}
					ok.Add(1)
				})
			}
			wg.Wait()
			if ok.Load() != n {
				t.Errorf("got %d results, want %d", ok.Load(), n)
			}
			if got := c.peak.Load(); got != int64(slots) {
				t.Errorf("peak concurrency %d, want exactly %d", got, slots)
			}
			if got := value(t, reg, "wmrl_sandbox_jobs_total", "ok"); got != n {
				t.Errorf("wmrl_sandbox_jobs_total{result=ok} = %v, want %d", got, n)
			}
			if got := value(t, reg, "wmrl_sandbox_slots_busy", ""); got != 0 {
				t.Errorf("wmrl_sandbox_slots_busy = %v after the jobs, want 0", got)
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
	p, err := NewPool(exec, 1, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := p.instrument(reg); err != nil {
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
	if calls != 2 {
		t.Errorf("%d executor calls, want 2", calls)
	}
	for label, want := range map[string]float64{"error": 1, "ok": 1} {
		if got := value(t, reg, "wmrl_sandbox_jobs_total", label); got != want {
			t.Errorf("wmrl_sandbox_jobs_total{result=%q} = %v, want %v", label, got, want)
		}
	}
	if got := value(t, reg, "wmrl_sandbox_slots_busy", ""); got != 0 {
		t.Errorf("wmrl_sandbox_slots_busy = %v after the jobs, want 0", got)
	}
}

func TestPoolSubmitWaitsForSlot(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		close(started)
		<-release
		return Result{Status: StatusOK}
	})
	p, _ := NewPool(exec, 1)
	first := make(chan Result)
	go func() {
		r, _ := p.Submit(context.Background(), Job{})
		first <- r
	}()
	<-started
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

func TestNewPoolErrors(t *testing.T) {
	if _, err := NewPool(nil, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("nil executor: %v", err)
	}
	if _, err := NewPool(funcExecutor(nil), 0); !errors.Is(err, ErrConfig) {
		t.Errorf("zero slots: %v", err)
	}
}

// Each running job is told its slot: an index below Slots that no other
// running job holds, which is what lets an executor give a slot its own uid.
func TestPoolHandsOutSlotIndices(t *testing.T) {
	const slots, jobs = 3, 30
	var mu sync.Mutex
	held := map[int]bool{}
	seen := map[int]bool{}
	exec := funcExecutor(func(ctx context.Context, job Job) Result {
		mu.Lock()
		if job.Slot < 0 || job.Slot >= slots || held[job.Slot] {
			mu.Unlock()
			return Result{Status: StatusError, Reason: fmt.Sprintf("slot %d out of range or already running a job", job.Slot)}
		}
		held[job.Slot], seen[job.Slot] = true, true
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		held[job.Slot] = false
		mu.Unlock()
		return Result{Status: StatusOK}
	})
	p, err := NewPool(exec, slots)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range jobs {
		wg.Go(func() {
			if r, err := p.Submit(context.Background(), Job{Slot: 99}); err != nil || r.Status != StatusOK {
				t.Errorf("%+v, %v", r, err)
			}
		})
	}
	wg.Wait()
	if len(seen) != slots {
		t.Errorf("slots used %v, want all %d", seen, slots)
	}
}

// slotsExecutor serves at most n slots (a uid range of n uids).
type slotsExecutor struct {
	funcExecutor
	n int
}

func (e slotsExecutor) MaxSlots() int { return e.n }

// A pool larger than the executor's uid range is refused at start-up.
func TestNewPoolMoreSlotsThanUIDs(t *testing.T) {
	e := slotsExecutor{n: 2}
	if _, err := NewPool(e, 3); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "3 slots, but the executor has a uid for 2") {
		t.Errorf("3 slots on 2 uids: %v", err)
	}
	if _, err := NewPool(e, 2); err != nil {
		t.Errorf("2 slots on 2 uids: %v", err)
	}
	if _, err := NewPool(slotsExecutor{n: 0}, 8); err != nil {
		t.Errorf("no range: %v", err)
	}
}
