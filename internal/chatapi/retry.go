package chatapi

// The retry loop: waits from retry.Backoff, a server's Retry-After honoured but capped, transient
// statuses retried and every other failure returned at once. It is its own loop (not
// backoff.Retry) so that tests can inject Sleep and a Retry-After can replace a wait.

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/wmrl/wmrl/internal/retry"
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

// Retry reasons: the class of a transient failure. They are a small fixed set so that an
// Observe hook can use them as a metrics label.
const (
	ReasonRateLimited = "429"
	ReasonServerError = "5xx"
	ReasonTimeout     = "timeout"
	ReasonTransport   = "transport"
)

// StatusReason is the retry reason of an HTTP status worth retrying, and "" for any other: rate
// limiting and server-side failures are transient, while every other 4xx means the request
// itself is wrong and would fail again identically.
func StatusReason(code int) string {
	switch {
	case code == http.StatusTooManyRequests:
		return ReasonRateLimited
	case code >= 500:
		return ReasonServerError
	}
	return ""
}

// Attempt is what one try reports to the loop.
type Attempt struct {
	// Retry says the failure is transient; false ends the loop (success or a permanent failure).
	Retry bool
	// RetryAfter is the server's requested wait, when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Reason classes a transient failure (one of the Reason constants); Observe hears it.
	Reason string
}

// Policy bounds the loop: at most MaxAttempts tries (at least one), waits from Backoff, slept
// with Sleep (default: the package's Sleep).
type Policy struct {
	MaxAttempts int
	Backoff     retry.Backoff
	Sleep       SleepFunc
	// Observe, when not nil, hears every retry with the reason its try reported, before the wait.
	// It is the policy-wide hook for metrics, so chatapi needs no metrics library; Do's onRetry
	// is per call, for logging. It must be safe for concurrent use.
	Observe func(reason string, delay time.Duration)
}

// Do calls try (with the attempt number, from 1) until it reports no retry or MaxAttempts tries
// were made, and returns the number of tries. onRetry, when not nil, hears each wait before it is
// slept. err is non-nil only when ctx ended, and is then ctx's cause: the caller's last try result
// says how the loop ended otherwise.
func (p Policy) Do(ctx context.Context, try func(n int) Attempt, onRetry func(n int, delay time.Duration)) (int, error) {
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	b := p.Backoff.New()
	for n := 1; ; n++ {
		a := try(n)
		if ctx.Err() != nil {
			return n, context.Cause(ctx)
		}
		if !a.Retry || n >= p.MaxAttempts {
			return n, nil
		}
		delay := b.NextBackOff()
		if a.HasRetryAfter {
			delay = min(a.RetryAfter, p.Backoff.Max)
		}
		if p.Observe != nil {
			p.Observe(a.Reason, delay)
		}
		if onRetry != nil {
			onRetry(n, delay)
		}
		if err := sleep(ctx, delay); err != nil || ctx.Err() != nil {
			return n, context.Cause(ctx)
		}
	}
}
