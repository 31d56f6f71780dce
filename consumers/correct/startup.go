package correct

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/wmrl/wmrl/internal/retry"
	"github.com/wmrl/wmrl/internal/topicadmin"
)

// checkTopics verifies that the topics the consumer reads and writes exist and that the
// co-partitioned ones share one partition count (records of a run must meet on one partition).
func (c *Consumer) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(c.cfg.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("correct: kafka client: %w", err)
	}
	defer cl.Close()
	d := c.cfg.StartupTimeout
	if d <= 0 {
		d = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n := c.cfg.Names
	need := append(inputTopics(n), n.Runs(), n.Advantages(), n.Calibration(), n.DLQ())
	if err := topicadmin.RequireLayout(ctx, kadm.NewClient(cl), n, need); err != nil {
		return fmt.Errorf("correct: %w", err)
	}
	return nil
}

// fencePredecessor bumps the producer epoch of the transactional id before joining the group.
// The broker then aborts a crashed predecessor's open transaction at once; without it the
// group's stable offset fetch would wait for that transaction to time out.
func (c *Consumer) fencePredecessor(ctx context.Context) error {
	cl, err := kgo.NewClient(c.cfg.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("correct: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrInitProducerIDRequest()
	id := c.cfg.TransactionalID
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = int32(c.cfg.TxnTimeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	// The broker answers CONCURRENT_TRANSACTIONS while it still completes the predecessor's
	// transaction: worth the same short wait as a retriable code.
	var last error
	_, err = retry.Forever(ctx, backoff.NewConstantBackOff(200*time.Millisecond), func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil && !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions) {
			return retry.Permanent(err)
		}
		last = err
		return err
	}, nil)
	if err != nil && ctx.Err() != nil {
		err = errors.Join(ctx.Err(), last)
	}
	if err != nil {
		return fmt.Errorf("correct: init producer id for %s: %w", id, err)
	}
	return nil
}
