package correct

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmrl/wmrl/topics"
)

// outputPartitioner sends advantages and calibration snapshots to the partition number of the
// run's inputs (Record.Partition, set by the consumer) so the calibration partition read on
// assignment holds exactly the runs of that input partition; dead letters hash by key.
type outputPartitioner struct{ dlq string }

// commitReady seals complete steps and, if there is anything to write, runs one transaction.
// The transaction begins before the outputs are encoded, so that the broker already writes the
// first steps' records while later ones are being encoded; Redis is written after the commit on
// a goroutine of its own (see writeRedisAsync). A transaction that cannot commit (a failed flush
// or produce, an unreachable broker at End) is aborted and the state rebuilt; only errors a
// restart cannot fix are returned.
func (c *Consumer) commitReady(ctx context.Context, sess *kgo.GroupTransactSession) error {
	done, err := c.eng.sealReady()
	if err != nil {
		return fmt.Errorf("correct: %w", err)
	}
	c.reportVerdicts(c.eng.takeVerdicts())
	hold := c.eng.holdback()
	dlq := c.eng.takeDeadLetters(hold)
	clog, err := c.eng.takeChangelog()
	if err != nil {
		return fmt.Errorf("correct: %w", err)
	}
	if len(done) == 0 && len(dlq) == 0 && clog.empty() {
		c.afterCommit()
		return nil
	}

	// The transaction runs on its own context: a shutdown signal must not cut it in half.
	tctx, cancel := context.WithTimeout(context.Background(), c.cfg.TxnTimeout+10*time.Second)
	defer cancel()
	if err := sess.Begin(); err != nil {
		if isFatalTxnErr(err) {
			return txnFatal("begin transaction", err)
		}
		// Still in an unconfirmed transaction, or the producer id could not be reloaded yet.
		return c.abortTxn(ctx, sess, fmt.Errorf("begin transaction: %w", err))
	}
	out := &txnOutputs{c: c, ctx: tctx, sess: sess}
	snaps, err := c.produceOutputs(done, out.produce)
	if err != nil {
		// Nothing of this transaction may become visible; the consumer stops with err.
		if aerr := c.abortTxn(ctx, sess, err); aerr != nil {
			c.log.Error("abort after an encoding failure failed", "err", aerr)
		}
		return err
	}
	// After the sealed steps' records, so a run's end record follows its last snapshots.
	for _, r := range slices.Concat(clog.recs, dlq) {
		out.produce(r)
	}
	if err := sess.Client().Flush(tctx); err != nil {
		return c.abortTxn(ctx, sess, fmt.Errorf("flush: %w", err))
	}
	out.mu.Lock()
	ferr, refused := out.err, out.refused
	out.mu.Unlock()
	if ferr != nil {
		// A failed produce dooms the transaction. A dead letter refused for good would be refused
		// again after the rebuild; its source is skipped from now on, so the redo commits.
		c.skipRefused(refused)
		return c.abortTxn(ctx, sess, ferr)
	}
	// Commit input offsets only up to the oldest record still buffered for an unsealed step:
	// End would otherwise commit everything polled, and a crash would lose those inputs.
	ectx := kgo.PreTxnCommitFnContext(tctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		holdOffsets(req, hold)
		return nil
	})
	committed, err := sess.End(ectx, kgo.TryCommit)
	switch {
	case err != nil && isFatalTxnErr(err):
		c.m.txns.WithLabelValues("aborted").Inc()
		return txnFatal("transaction", err)
	case err != nil:
		// The commit's outcome is unknown (EndTxn failed on the wire) and the client is still in
		// the transaction: abort it for certain before anything else.
		return c.abortTxn(ctx, sess, fmt.Errorf("end transaction: %w", err))
	case !committed:
		// End aborted (a rebalance since Begin) and rewound the consumer to the committed offsets;
		// the sealed steps of this transaction are undone by reloading every owned partition.
		c.m.txns.WithLabelValues("aborted").Inc()
		c.stats.aborts++
		c.log.Warn("transaction aborted by a rebalance; rebuilding state from the changelog")
		c.markChanged()
		return nil
	}
	c.committed(done, dlq, snaps, clog)
	return nil
}

// committed accounts for a committed transaction (metrics, stats, logs), retires what it ended
// and hands its states to Redis.
func (c *Consumer) committed(done []*sealed, dlq []*kgo.Record, snaps []*topics.CalibrationSnapshot, clog changelogOut) {
	c.outage.committed()
	c.m.txns.WithLabelValues("committed").Inc()
	c.stats.txns++
	c.stats.dlq += int64(len(dlq))
	for _, r := range dlq {
		reason, _ := topics.HeaderValue(r.Headers, topics.HeaderDLQReason)
		c.m.deadLetters.WithLabelValues(reason).Inc()
	}
	c.m.sealedSteps.Add(float64(len(done)))
	for _, sn := range snaps {
		c.m.observe(sn)
	}
	c.logEnds(clog.ends)
	c.m.tombstoned.Add(float64(len(clog.tombed)))
	c.m.idleEnded.Add(float64(clog.idle))
	var infos []SealedStep
	now := time.Now()
	for _, s := range done {
		c.m.rows.Add(float64(len(s.rows)))
		c.m.staleRows.Add(float64(s.staleRows))
		c.observeMasked(s, now)
		c.m.sealLatency.Observe(now.Sub(s.lastInput).Seconds())
		c.stats.steps++
		c.stats.rows += int64(len(s.rows))
		c.log.Debug("step sealed", "run", s.run, "step", s.step, "rows", len(s.rows), "streams", len(s.snaps))
		if s.staleRows > 0 {
			c.log.Info("step masked as stale (--max-staleness)", "run", s.run, "step", s.step, "rows", s.staleRows, "max_staleness", c.cfg.MaxStaleness)
		}
		infos = append(infos, SealedStep{Run: s.run, Step: s.step, Rows: len(s.rows), LastInput: s.lastInput})
	}
	// After observeMasked: it sets the masked-share series of the steps just sealed, among them
	// the last steps of the runs retired now, whose series afterCommit deletes (before, every
	// ended run left one masked-share series per stream behind; found by the soak).
	c.afterCommit()
	// Redis only after the commit, so it is never ahead of committed output.
	c.writeRedisAsync(done, infos, clog)
}

// txnOutputs produces records into the open transaction and keeps the first failure and the
// dead letters refused for good (produce callbacks run on the client's goroutines).
type txnOutputs struct {
	c       *Consumer
	ctx     context.Context
	sess    *kgo.GroupTransactSession
	mu      sync.Mutex
	err     error
	refused []refusedDeadLetter
}

func (o *txnOutputs) produce(r *kgo.Record) {
	o.sess.Produce(o.ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.err == nil {
			o.err = fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, err)
		}
		if rd, ok := o.c.refused(r, err); ok {
			o.refused = append(o.refused, rd)
		}
	})
}

// holdOffsets lowers each partition's offset in req to the holdback, never raising one.
func holdOffsets(req *kmsg.TxnOffsetCommitRequest, hold map[tp]offEpoch) {
	for i := range req.Topics {
		t := &req.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if h, ok := hold[tp{t.Topic, p.Partition}]; ok && h.off < p.Offset {
				p.Offset, p.LeaderEpoch = h.off, h.epoch
			}
		}
	}
}

func isFatalTxnErr(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.UnknownTopicID)
}

// produceOutputs builds and produces, in step order, the records of the sealed steps: per step
// its advantage chunks (key run_id, chunk i/n headers) and one calibration snapshot per stream,
// all on the run's partition. Encoding is pure and most of a transaction's CPU, so with several
// steps it runs on all cores while the records of earlier steps are already being produced.
func (c *Consumer) produceOutputs(done []*sealed, produce func(*kgo.Record)) ([]*topics.CalibrationSnapshot, error) {
	var snaps []*topics.CalibrationSnapshot
	now := time.Now().UTC()
	for _, s := range done {
		for i := range s.snaps {
			s.snaps[i].CreatedAt = now
			snaps = append(snaps, &s.snaps[i])
		}
	}
	recs := make([][]*kgo.Record, len(done))
	err := ordered(len(done), func(_, i int) (err error) {
		recs[i], err = c.stepRecords(done[i])
		return err
	}, func(i int) error {
		for _, r := range recs[i] {
			produce(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return snaps, nil
}

// stepRecords encodes one sealed step's records (advantage chunks, then the snapshots).
func (c *Consumer) stepRecords(s *sealed) ([]*kgo.Record, error) {
	recs, err := c.cfg.Names.AdvantageRecords(s.run, "", s.step, s.rows, c.cfg.ChunkBytes)
	if err != nil {
		return nil, fmt.Errorf("correct: advantages run %s step %d: %w", s.run, s.step, err)
	}
	for _, r := range recs {
		r.Partition = s.part
	}
	return calibrationRecords(c.cfg.Names, s, recs)
}
