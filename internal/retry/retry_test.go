package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

func TestBackoffGrowsJitteredAndCapped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, max time.Duration
	}{
		{"outage", 250 * time.Millisecond, 10 * time.Second},
		{"http", 100 * time.Millisecond, 10 * time.Second},
		{"base is max", time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Backoff{Base: tc.base, Max: tc.max}.New()
			d := tc.base
			for i := range 200 {
				w := b.NextBackOff()
				if w < d/2 || w > d {
					t.Fatalf("wait %d = %v, want in [%v, %v]", i, w, d/2, d)
				}
				d = min(2*d, tc.max)
			}
		})
	}
}

func TestForever(t *testing.T) {
	fail := errors.New("broker away")
	verdict := errors.New("config changed")
	for _, tc := range []struct {
		name      string
		results   []error // what each try returns; the last one repeats
		wantTries int
		wantErr   error
	}{
		{"success at once", []error{nil}, 1, nil},
		{"success after outage", []error{fail, fail, fail, nil}, 4, nil},
		{"permanent ends it, unwrapped", []error{fail, Permanent(verdict)}, 2, verdict},
		{"no cap on tries", append(repeat(fail, 30), nil), 31, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := tc.results
			var notified []int
			tries, err := Forever(context.Background(), backoff.NewConstantBackOff(time.Microsecond), func() error {
				return results[min(len(notified), len(results)-1)]
			}, func(try int, _ error, _ time.Duration) { notified = append(notified, try) })
			if tries != tc.wantTries || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Forever = %d, %v; want %d tries, %v", tries, err, tc.wantTries, tc.wantErr)
			}
			var pe *backoff.PermanentError
			if errors.As(err, &pe) {
				t.Errorf("Forever returned the Permanent wrapper %v", err)
			}
			if err == nil && len(notified) != tries-1 {
				t.Errorf("notify heard %v, want one call per failed try", notified)
			}
		})
	}
}

func TestForeverEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	tries, err := Forever(ctx, Backoff{Base: time.Hour, Max: time.Hour}.New(), func() error {
		cancel()
		return errors.New("broker away")
	}, nil)
	if tries != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Forever on a cancelled context = %d, %v; want 1 try, context.Canceled", tries, err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("Forever did not return at once on a cancelled context")
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func TestDrawn(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		got, want []time.Duration
		ok        bool
	}{
		{"none", nil, nil, true},
		{"floor and ceiling", []time.Duration{50 * ms, 200 * ms}, []time.Duration{100 * ms, 200 * ms}, true},
		{"below the floor", []time.Duration{49 * ms}, []time.Duration{100 * ms}, false},
		{"above the ceiling", []time.Duration{101 * ms}, []time.Duration{100 * ms}, false},
		{"fixed wait", []time.Duration{3 * time.Second}, []time.Duration{3 * time.Second}, true},
		{"one wait missing", []time.Duration{100 * ms}, []time.Duration{100 * ms, 200 * ms}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Drawn(tc.got, tc.want); got != tc.ok {
				t.Errorf("Drawn(%v, %v) = %v, want %v", tc.got, tc.want, got, tc.ok)
			}
		})
	}
}
