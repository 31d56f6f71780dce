package correct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

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
