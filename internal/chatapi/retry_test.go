package chatapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/retry"
)

func TestPolicyDo(t *testing.T) {
	b := retry.Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}
	tests := []struct {
		name      string
		attempts  []Attempt // what each try reports; the last one repeats
		max       int
		wantTries int
		wantWaits []time.Duration
	}{
		{"success first try", []Attempt{{}}, 5, 1, nil},
		{"no header uses backoff", []Attempt{{Retry: true}, {Retry: true}, {}}, 5, 3, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"header wins over backoff", []Attempt{{Retry: true, HasRetryAfter: true, RetryAfter: 3 * time.Second}, {}}, 5, 2, []time.Duration{3 * time.Second}},
		{"header zero retries at once", []Attempt{{Retry: true, HasRetryAfter: true}, {}}, 5, 2, []time.Duration{0}},
		{"header capped by max", []Attempt{{Retry: true, HasRetryAfter: true, RetryAfter: time.Hour}, {}}, 5, 2, []time.Duration{10 * time.Second}},
		{"gives up at max attempts", []Attempt{{Retry: true}}, 3, 3, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"zero max still tries once", []Attempt{{Retry: true}}, 0, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slept, heard []time.Duration
			p := Policy{MaxAttempts: tt.max, Backoff: b, Sleep: func(_ context.Context, d time.Duration) error {
				slept = append(slept, d)
				return nil
			}}
			n, err := p.Do(context.Background(), func(n int) Attempt {
				return tt.attempts[min(n, len(tt.attempts))-1]
			}, func(_ int, d time.Duration) { heard = append(heard, d) })
			if err != nil || n != tt.wantTries {
				t.Fatalf("Do = %d, %v; want %d tries", n, err, tt.wantTries)
			}
			if !retry.Drawn(slept, tt.wantWaits) || !slices.Equal(heard, slept) {
				t.Fatalf("slept %v, onRetry heard %v, want each in [w/2, w] of %v", slept, heard, tt.wantWaits)
			}
		})
	}
}

// TestPolicyObserve checks that the policy-wide hook hears every retry with its reason and wait,
// and nothing for the try that ends the loop.
func TestPolicyObserve(t *testing.T) {
	type heard struct {
		reason string
		delay  time.Duration
	}
	tests := []struct {
		name     string
		attempts []Attempt // the last one repeats
		max      int
		want     []heard
	}{
		{"success first try", []Attempt{{}}, 3, nil},
		{"two reasons then success", []Attempt{
			{Retry: true, Reason: ReasonRateLimited, HasRetryAfter: true, RetryAfter: time.Second},
			{Retry: true, Reason: ReasonTimeout},
			{},
		}, 5, []heard{{ReasonRateLimited, time.Second}, {ReasonTimeout, 200 * time.Millisecond}}},
		{"last try of an exhausted loop is not a retry", []Attempt{{Retry: true, Reason: ReasonServerError}}, 2,
			[]heard{{ReasonServerError, 100 * time.Millisecond}}},
		{"permanent failure is not a retry", []Attempt{{Reason: ReasonTransport}}, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []heard
			p := Policy{
				MaxAttempts: tt.max,
				Backoff:     retry.Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second},
				Sleep:       func(context.Context, time.Duration) error { return nil },
				Observe:     func(reason string, d time.Duration) { got = append(got, heard{reason, d}) },
			}
			if _, err := p.Do(context.Background(), func(n int) Attempt {
				return tt.attempts[min(n, len(tt.attempts))-1]
			}, nil); err != nil {
				t.Fatal(err)
			}
			var reasons, wantReasons []string
			var waits, wantWaits []time.Duration
			for _, h := range got {
				reasons, waits = append(reasons, h.reason), append(waits, h.delay)
			}
			for _, h := range tt.want {
				wantReasons, wantWaits = append(wantReasons, h.reason), append(wantWaits, h.delay)
			}
			if !slices.Equal(reasons, wantReasons) || !retry.Drawn(waits, wantWaits) {
				t.Fatalf("Observe heard %v, want %v (waits in [w/2, w])", got, tt.want)
			}
		})
	}
}

func TestPolicyDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("shutting down")
	p := Policy{MaxAttempts: 100, Backoff: retry.Backoff{Base: time.Hour, Max: time.Hour}}
	n, err := p.Do(ctx, func(int) Attempt {
		cancel(stop)
		return Attempt{Retry: true}
	}, nil)
	if n != 1 || !errors.Is(err, stop) {
		t.Fatalf("Do = %d, %v; want 1 try and the context's cause", n, err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header string
		want   time.Duration
		wantOK bool
	}{
		{"absent", "", 0, false},
		{"seconds", "3", 3 * time.Second, true},
		{"seconds with spaces", " 120 ", 120 * time.Second, true},
		{"zero", "0", 0, true},
		{"fractional seconds", "1.5", 1500 * time.Millisecond, true},
		{"huge seconds saturate", "99999999999999999999999", time.Duration(math.MaxInt64), true},
		{"http date", now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second, true},
		{"rfc850 date", now.Add(time.Minute).Format("Monday, 02-Jan-06 15:04:05 GMT"), time.Minute, true},
		{"date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"negative seconds", "-5", 0, false},
		{"garbage", "soon", 0, false},
		{"hex is not seconds", "0x10", 0, false},
		{"inf is not seconds", "Inf", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.header, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.header, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestStatusReason: rate limiting and server errors are retried, each under its reason; every
// other status is not.
func TestStatusReason(t *testing.T) {
	tests := []struct {
		code int
		want string
	}{
		{http.StatusTooManyRequests, ReasonRateLimited},
		{http.StatusInternalServerError, ReasonServerError},
		{http.StatusBadGateway, ReasonServerError},
		{http.StatusServiceUnavailable, ReasonServerError},
		{http.StatusGatewayTimeout, ReasonServerError},
		{http.StatusBadRequest, ""},
		{http.StatusUnauthorized, ""},
		{http.StatusForbidden, ""},
		{http.StatusNotFound, ""},
		{http.StatusRequestTimeout, ""},
		{http.StatusUnprocessableEntity, ""},
		{http.StatusMovedPermanently, ""},
		{http.StatusOK, ""},
	}
	for _, tt := range tests {
		if got := StatusReason(tt.code); got != tt.want {
			t.Errorf("StatusReason(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
}

func TestSleepStopsOnCancel(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start := time.Now()
	err := Sleep(ctx, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Sleep took %v after cancel", el)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) on done ctx = %v, want context.Canceled", err)
	}
}
