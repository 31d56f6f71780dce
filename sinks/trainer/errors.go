package trainer

import "errors"

var (
	// ErrRevoked is returned by Ack for a step whose partition was revoked from this consumer in
	// a rebalance; the new owner re-delivers the step.
	ErrRevoked = errors.New("partition revoked before ack")
	// ErrClosed is returned by a Stream after Close.
	ErrClosed = errors.New("trainer stream closed")
)
