package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of FailuresConfig.
const (
	DefaultMaxFailureShare = 0.5
	DefaultFailureWindow   = 100
	DefaultLogEvery        = 10 * time.Second
	// minResults is the fewest results the share is judged on (capped at the window): one failed
	// first request must not make a fresh stage unhealthy, ten in a row should.
	minResults = 10
)

// ErrFailureShare is what Failures.Check wraps when the failure share passes its threshold.
var ErrFailureShare = errors.New("failure share above threshold")

// ErrStalled is what Failures.Check wraps while work is in flight with no result for StallAfter.
var ErrStalled = errors.New("no result while work is in flight")

// FailuresConfig configures Failures.
type FailuresConfig struct {
	// What names the work in logs and errors, e.g. "scoring".
	What string
	// MaxShare is the failure share of the last Window results above which Check fails
	// (0: DefaultMaxFailureShare; above 1: never).
	MaxShare float64
	// Window is how many recent results the share is taken over (0: DefaultFailureWindow).
	Window int
	// LogEvery bounds the warnings to one per interval (0: DefaultLogEvery); each carries the
	// failures counted since the last one and the first of their errors verbatim.
	LogEvery time.Duration
	Logger   *slog.Logger
	// Share, when set, is called with the window's failure share after every result (a gauge).
	Share func(float64)
	// StallAfter is how long work may be in flight with no result before Check fails and Watch
	// warns (0: never). A judge that accepts requests and never answers produces no failure until
	// its requests time out after every retry (minutes with the default timeout and attempts);
	// this sees it within StallAfter plus one tick of Watch.
	StallAfter time.Duration
	Now        func() time.Time
}

// Failures watches the outcomes of a stage's unit of work (a scoring request, an execution) whose
// failure is recorded rather than raised: such a stage keeps consuming, committing and looking
// ready while every result is a failure, so without this the operator learns of a dead judge
// from all-zero advantages hours later. It logs failures at warn (rate-limited), and Check — served
// as a health endpoint — fails while the failure share over the last Window results is above
// MaxShare.
type Failures struct {
	cfg FailuresConfig

	mu     sync.Mutex
	ring   []bool // true: failed
	next   int
	n      int
	failed int
	last   string // the latest failure's error, for Check's message

	total      int // failures since start
	lastLog    time.Time
	sinceLog   int // failures since the last warning
	resultsLog int // results since the last warning
	firstSince string

	inflight     int       // work started (Begin) and not finished (End)
	progressAt   time.Time // the last End, or the Begin that made inflight 1
	lastStallLog time.Time
}

// NewFailures applies cfg's defaults.
func NewFailures(cfg FailuresConfig) *Failures {
	cfg.What = cmp.Or(cfg.What, "work")
	if cfg.MaxShare <= 0 {
		cfg.MaxShare = DefaultMaxFailureShare
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultFailureWindow
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = DefaultLogEvery
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Failures{cfg: cfg, ring: make([]bool, cfg.Window)}
}

// Observe records one result: nil for success, the failure otherwise.
func (f *Failures) Observe(err error) {
	f.mu.Lock()
	failed := err != nil
	if f.n == len(f.ring) {
		if f.ring[f.next] {
			f.failed--
		}
	} else {
		f.n++
	}
	f.ring[f.next] = failed
	f.next = (f.next + 1) % len(f.ring)
	f.resultsLog++
	var logArgs []any
	if failed {
		f.failed++
		f.total++
		f.sinceLog++
		f.last = err.Error()
		f.firstSince = cmp.Or(f.firstSince, f.last)
		if now := f.cfg.Now(); f.lastLog.IsZero() || now.Sub(f.lastLog) >= f.cfg.LogEvery {
			logArgs = f.takeLogLocked(now)
		}
	}
	share := f.shareLocked()
	f.mu.Unlock()
	f.warnFailures(logArgs)
	if f.cfg.Share != nil {
		f.cfg.Share(share)
	}
}

// takeLogLocked returns the arguments of a failure warning and starts counting the next one.
func (f *Failures) takeLogLocked(now time.Time) []any {
	args := []any{"failed", f.sinceLog, "results", f.resultsLog, "failed_total", f.total,
		"window_share", f.shareLocked(), "first_error", f.firstSince}
	f.lastLog, f.sinceLog, f.resultsLog, f.firstSince = now, 0, 0, ""
	return args
}

func (f *Failures) warnFailures(args []any) {
	if args != nil {
		f.cfg.Logger.Warn(f.cfg.What+" failures (failed of results since the last such warning; first error verbatim)", args...)
	}
}

// Begin notes that one unit of work started; End that it finished (whatever its outcome). They
// feed the stall check (StallAfter).
func (f *Failures) Begin() {
	f.mu.Lock()
	f.inflight++
	if f.inflight == 1 {
		f.progressAt = f.cfg.Now()
	}
	f.mu.Unlock()
}

// End notes that one unit of work Begin counted finished.
func (f *Failures) End() {
	f.mu.Lock()
	f.inflight--
	f.progressAt = f.cfg.Now()
	f.mu.Unlock()
}

// stalledLocked returns how long work has been in flight with no result, or 0 while that is
// below StallAfter (or the check is off).
func (f *Failures) stalledLocked(now time.Time) time.Duration {
	if f.cfg.StallAfter <= 0 || f.inflight <= 0 {
		return 0
	}
	if d := now.Sub(f.progressAt); d >= f.cfg.StallAfter {
		return d
	}
	return 0
}

// Watch runs until ctx ends, about once a second (more often with a StallAfter below 4 s): it
// warns while work is stalled (at most once per LogEvery) and logs the failures a burst left
// uncounted once LogEvery has passed since the last warning, so a burst's true count is logged
// when the burst happens, not with the first failure of the next incident.
func (f *Failures) Watch(ctx context.Context) {
	every := time.Second
	if f.cfg.StallAfter > 0 {
		every = min(every, f.cfg.StallAfter/4)
	}
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.tick()
	}
}

// tick is one round of Watch.
func (f *Failures) tick() {
	f.mu.Lock()
	now := f.cfg.Now()
	var failArgs, stallArgs []any
	if f.sinceLog > 0 && now.Sub(f.lastLog) >= f.cfg.LogEvery {
		failArgs = f.takeLogLocked(now)
	}
	if d := f.stalledLocked(now); d > 0 && (f.lastStallLog.IsZero() || now.Sub(f.lastStallLog) >= f.cfg.LogEvery) {
		f.lastStallLog = now
		stallArgs = []any{"in_flight", f.inflight, "no_result_for", d.Round(time.Second), "stall_after", f.cfg.StallAfter}
	}
	f.mu.Unlock()
	f.warnFailures(failArgs)
	if stallArgs != nil {
		f.cfg.Logger.Warn(f.cfg.What+" stalled: work in flight and no result (a server that accepts requests and never answers?)", stallArgs...)
	}
}

func (f *Failures) shareLocked() float64 {
	if f.n == 0 {
		return 0
	}
	return float64(f.failed) / float64(f.n)
}

// Check is nil unless at least min(10, Window) results were seen and the share of failures among
// the last Window of them is above MaxShare; the error then gives the counts and the latest error.
//
// Before that, it fails while work is stalled: in flight with no result for StallAfter.
func (f *Failures) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.stalledLocked(f.cfg.Now()); d > 0 {
		return fmt.Errorf("%w: %s: %d in flight and no result for %s (limit %s)", ErrStalled, f.cfg.What, f.inflight, d.Round(time.Second), f.cfg.StallAfter)
	}
	if f.n < min(minResults, len(f.ring)) || f.shareLocked() <= f.cfg.MaxShare {
		return nil
	}
	return fmt.Errorf("%w: %s failed for %d of the last %d results (%.0f%% > %.0f%%); latest error: %s",
		ErrFailureShare, f.cfg.What, f.failed, f.n, 100*f.shareLocked(), 100*f.cfg.MaxShare, f.last)
}
