package worldmodel

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var deltaSecondsRE = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)?$`)

// SleepFunc waits for d or until ctx is done, returning ctx's error in the latter case. It is
// injectable so tests can record backoff delays instead of waiting for them.
type SleepFunc func(ctx context.Context, d time.Duration) error

// Sleep is the default SleepFunc: a timer that gives up as soon as ctx is done, so a shutdown is
// never held up by a long Retry-After.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Backoff computes jittered exponential retry delays. The delay before retry n (n ≥ 1) is drawn
// uniformly from [d/2, d] with d = min(Max, Base·2^(n−1)): "equal jitter" spreads synchronized
// clients apart while keeping a floor, so retries never collapse into an immediate storm.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
	// Rand returns a uniform value in [0, 1); it must be safe for concurrent use.
	Rand func() float64
}

// Delay returns the wait before retry n, where n = 1 is the first retry.
func (b Backoff) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	half := d / 2
	return half + time.Duration(b.Rand()*float64(d-half))
}

// ParseRetryAfter reads an HTTP Retry-After value, either delta-seconds (fractions tolerated) or
// an HTTP date relative to now. A date in the past means "retry now". ok is false when the header
// is absent or malformed, in which case the caller falls back to its own backoff.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if deltaSecondsRE.MatchString(v) {
		// Only a range error is possible here, and it yields +Inf: an effectively endless wait.
		secs, _ := strconv.ParseFloat(v, 64)
		if secs >= math.MaxInt64/float64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}

// retryableStatus says whether an HTTP status is worth retrying: rate limiting and server-side
// failures are transient, while every other 4xx means the request itself is wrong and would fail
// again identically.
func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500
}

// retryDelay picks the wait before retry n after outcome o: the server's Retry-After when it sent
// one, else the jittered backoff, never more than Max.
func (b Backoff) retryDelay(n int, o outcome) time.Duration {
	if o.hasRetryAfter {
		return min(o.retryAfter, b.Max)
	}
	return b.Delay(n)
}
