// Package retry is wmrl's one way to wait between tries, on github.com/cenkalti/backoff/v5: the
// correction consumer riding out a Kafka or Redis outage, its startup fencing, and the HTTP
// clients' loop (internal/chatapi) all draw their waits from Backoff.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff is a jittered exponential schedule: each wait is uniform in [d/2, d], d doubling from
// Base to Max. The floor keeps retries from collapsing into a storm; the jitter keeps instances
// that failed together from retrying in step against a returning server.
type Backoff struct {
	Base, Max time.Duration
}

// New returns the schedule as a backoff.BackOff. The library draws from [c·(1−f), c·(1+f)];
// with c = ¾d and f = ⅓ that is [d/2, d].
func (b Backoff) New() *backoff.ExponentialBackOff {
	e := &backoff.ExponentialBackOff{
		InitialInterval:     b.Base * 3 / 4,
		MaxInterval:         b.Max * 3 / 4,
		Multiplier:          2,
		RandomizationFactor: 1.0 / 3,
	}
	e.Reset()
	return e
}

// Permanent marks err as one a retry cannot fix: Forever returns it at once.
func Permanent(err error) error { return backoff.Permanent(err) }

// Forever calls op until it succeeds, returns a Permanent error (returned unwrapped) or ctx ends
// (ctx's cause is returned), waiting by s between tries: there is no cap on tries or elapsed
// time, unlike backoff.Retry's default of 15 minutes, because an outage is ridden out however
// long it lasts. notify, when not nil, hears each failure with its try number (from 1) and the
// wait before the next try. tries is how many times op ran.
func Forever(ctx context.Context, s backoff.BackOff, op func() error, notify func(try int, err error, wait time.Duration)) (tries int, err error) {
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		return struct{}{}, op()
	}, backoff.WithBackOff(s), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, d time.Duration) {
		if notify != nil {
			notify(tries, err, d)
		}
	}))
	return tries, err
}

// Drawn reports whether each wait in got could come from a Backoff whose ceilings were want:
// in [w/2, w] (a fixed wait, such as a server's Retry-After, is its own ceiling). It is for the
// tests of callers that inject their sleep, since the jitter is not theirs to seed.
func Drawn(got, want []time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if got[i] < w/2 || got[i] > w {
			return false
		}
	}
	return true
}
