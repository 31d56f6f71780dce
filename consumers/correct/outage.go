package correct

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/internal/retry"
	"github.com/wmrl/wmrl/internal/stage"
)

// Outages (a broker or Redis away for minutes) are ridden out in place: a failed flush, produce
// or transaction end aborts the transaction and rewinds to the committed offsets, a failed state
// reload is retried, and the loop backs off with jitter meanwhile. The consumer exits only on
// what a restart cannot fix: fenced by a successor, a changed correction config, an unreadable
// changelog.

// outageBackoff paces the retries of an outage: from 250 ms up to 10 s between tries.
var outageBackoff = retry.Backoff{Base: 250 * time.Millisecond, Max: 10 * time.Second}

// transient reports whether err is what an outage looks like (a refused or reset connection, a
// timeout, a broker-side retriable code) rather than a verdict a retry cannot change. franz-go's
// own test leaves out refused dials (it wants call sites to choose) and deadlines, which are
// exactly what a broker or Redis away for minutes produces.
func transient(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) ||
		kgo.IsRetryableBrokerErr(err) || kerr.IsRetriable(err)
}

// abortTxn ends the open transaction as an abort and rewinds the consumer to its committed
// offsets, retrying until the client confirms it: GroupTransactSession.End leaves the client in
// the transaction when EndTxn fails on the wire (its outcome is then unknown), and only a
// confirmed abort (or the producer-id reload that fences the old epoch) makes Begin legal again.
// The engine's sealed-but-uncommitted steps are undone by the state reload markChanged asks for.
func (c *Consumer) abortTxn(ctx context.Context, sess *kgo.GroupTransactSession, cause error) error {
	c.m.txns.WithLabelValues("aborted").Inc()
	c.stats.aborts++
	c.markChanged()
	c.log.Warn("transaction aborted; state will be rebuilt from the changelog", "cause", cause)
	tries, err := retry.Forever(ctx, outageBackoff.New(), func() error {
		actx, cancel := context.WithTimeout(context.Background(), c.cfg.TxnTimeout+10*time.Second)
		defer cancel()
		_, err := sess.End(actx, kgo.TryAbort)
		switch {
		case err == nil:
			return nil
		case isFatalTxnErr(err):
			return retry.Permanent(txnFatal("abort transaction", err))
		}
		c.outage.set(err)
		return err
	}, func(try int, err error, d time.Duration) {
		c.logOutage("transaction abort not confirmed; retrying", err, "attempt", try, "retry_in", d.Round(time.Millisecond))
	})
	if err != nil {
		// Shutting down (or fenced): the broker aborts the transaction after its timeout, and a
		// successor with the same transactional id fences it at once.
		return err
	}
	if tries > 1 {
		c.log.Info("transaction abort confirmed", "attempts", tries)
	}
	return nil
}

// outageState is what /readyz and the logs know of the last failure to reach the cluster.
type outageState struct {
	mu     sync.Mutex
	err    error     // nil: the cluster answered last time
	since  time.Time // when the current outage began
	logged time.Time // last outage log line (rate limit)
	loaded bool      // state of the owned partitions is loaded (false during a reload)
	pinged bool      // the cluster answered at least once
	// disrupted: a cluster error since the last commit; reinits: new sessions since then.
	disrupted bool
	reinits   int
}

func (o *outageState) set(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil && o.err == nil {
		o.since = time.Now()
	}
	if err != nil {
		o.disrupted = true
	}
	o.err = err
	if err == nil {
		o.pinged = true
	}
}

// committed records that a transaction committed: the cluster works, progress was made.
func (o *outageState) committed() {
	o.mu.Lock()
	o.err, o.disrupted, o.reinits, o.pinged = nil, false, 0, true
	o.mu.Unlock()
}

func (o *outageState) setLoaded(v bool) {
	o.mu.Lock()
	o.loaded = v
	o.mu.Unlock()
}

// outageLogEvery rate-limits outage log lines: a poll every 250 ms would otherwise log each time.
const outageLogEvery = 10 * time.Second

// logOutage logs msg at WARN at most every outageLogEvery, with how long the outage has lasted.
func (c *Consumer) logOutage(msg string, err error, args ...any) {
	o := &c.outage
	o.mu.Lock()
	now := time.Now()
	if now.Sub(o.logged) < outageLogEvery {
		o.mu.Unlock()
		return
	}
	o.logged = now
	var lasted time.Duration
	if !o.since.IsZero() {
		lasted = now.Sub(o.since).Round(time.Second)
	}
	o.mu.Unlock()
	c.log.Warn(msg, append([]any{"err", err, "outage", lasted}, args...)...)
}

// ready is the /readyz check: the loop runs, the cluster answered the last ping, partitions are
// held and their state is loaded (not ready while a rebuild runs or is being retried).
func (c *Consumer) ready() error {
	if err := c.live(); err != nil {
		return err
	}
	o := &c.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.err != nil:
		return fmt.Errorf("kafka unreachable for %s: %w", time.Since(o.since).Round(time.Second), o.err)
	case !o.pinged:
		return errors.New("kafka not reached yet")
	case len(c.owned()) == 0:
		return errors.New("no partitions assigned")
	case !o.loaded:
		return errors.New("correction state not loaded (rebuild running)")
	}
	return nil
}

// watch pings the cluster and refreshes the consumer-lag gauge until ctx ends.
func (c *Consumer) watch(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	health.Watch(ctx, cl, func(pctx context.Context, err error) {
		c.outage.set(err)
		if err == nil {
			stage.RefreshLag(pctx, adm, c.cfg.Group, c.inputs(), c.m.lag)
		}
	})
}

// txnFatal wraps a transaction error a retry cannot fix, marking epoch fencing as errEpochFenced.
func txnFatal(op string, err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("correct: %s: %w: %w", op, errEpochFenced, err)
	}
	return fmt.Errorf("correct: %s: %w", op, err)
}

// maxReinits bounds new sessions without a commit in between, so two instances misconfigured
// with one transactional id cannot fence each other forever.
const maxReinits = 3

// reclaimable reports whether a fenced producer may start over: only after an outage (a timed-out
// transaction is the broker's doing), only while the group still lists this client's member id (a
// zombie replaced by a successor is no longer listed) and only a few times without progress.
func (c *Consumer) reclaimable(ctx context.Context, sess *kgo.GroupTransactSession) bool {
	o := &c.outage
	o.mu.Lock()
	disrupted := o.disrupted
	o.reinits++
	reinits := o.reinits
	o.mu.Unlock()
	if !disrupted {
		c.log.Error("fenced without an outage: another instance runs with this --transactional-id", "transactional_id", c.cfg.TransactionalID)
		return false
	}
	if reinits > maxReinits {
		c.log.Error("fenced again after new sessions without a commit in between; stopping", "reinits", reinits-1)
		return false
	}
	member, _ := sess.Client().GroupMetadata()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(sess.Client()).DescribeGroups(dctx, c.cfg.Group)
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		c.log.Error("fenced, and the group cannot be described to tell a timed-out transaction from a successor", "err", err)
		return false
	}
	for _, m := range groups[c.cfg.Group].Members {
		if member != "" && m.MemberID == member {
			return true
		}
	}
	c.log.Error("fenced, and this instance is no longer a member of its group: a successor replaced it", "member_id", member)
	return false
}
