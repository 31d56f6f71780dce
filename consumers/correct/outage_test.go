package correct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestTransient(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dial refused, wrapped twice", fmt.Errorf("%w: list end offsets: %w", ErrChangelog, dial), true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"eof", fmt.Errorf("fetch: %w", io.EOF), true},
		{"deadline", fmt.Errorf("waiting for stable offsets: %w", context.DeadlineExceeded), true},
		{"retriable broker code", fmt.Errorf("x: %w", kerr.NotLeaderForPartition), true},
		{"coordinator moving", kerr.NotCoordinator, true},
		{"canceled is a shutdown, not an outage", context.Canceled, false},
		{"fenced", kerr.ProducerFenced, false},
		{"corrupt changelog", fmt.Errorf("%w: offset 3: %w", ErrChangelog, errors.New("state bytes do not match its digest")), false},
		{"config changed", ErrConfigChanged, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := transient(tc.err); got != tc.want {
				t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestBackoffGrowsJitteredAndCapped(t *testing.T) {
	b := newBackoff()
	ceiling := b.min
	for i := range 12 {
		d := b.next()
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("wait %d = %v, want in [%v, %v]", i, d, ceiling/2, ceiling)
		}
		ceiling = min(2*ceiling, b.max)
	}
	if b.d != b.max {
		t.Errorf("after 12 waits the delay is %v, want the cap %v", b.d, b.max)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("sleep did not return at once on a cancelled context")
	}
}

func TestTxnFatalMarksEpochFencing(t *testing.T) {
	for _, tc := range []struct {
		err    error
		fenced bool
	}{
		{kerr.ProducerFenced, true},
		{fmt.Errorf("producer ID has a fatal, unrecoverable error, err: %w", kerr.ProducerFenced), true},
		{kerr.InvalidProducerEpoch, true},
		{kerr.TransactionalIDAuthorizationFailed, false},
		{kerr.InvalidTxnState, false},
	} {
		err := txnFatal("begin transaction", tc.err)
		if got := errors.Is(err, errEpochFenced); got != tc.fenced {
			t.Errorf("txnFatal(%v): fenced = %v, want %v", tc.err, got, tc.fenced)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("txnFatal(%v) = %v: the cause is lost", tc.err, err)
		}
	}
}
