package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newRunsCmd) }

func newRunsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Operate on training runs (list the runs in Redis, show one, end one)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRunsEndCmd(a), newRunsListCmd(a), newRunsShowCmd(a))
	return cmd
}

// runsEndOptions holds `runs end`'s flags; its run method is the command's body.
type runsEndOptions struct {
	a           *app
	lastStep    int64
	redisPrefix string
	timeout     time.Duration
	wait        time.Duration
}

func newRunsEndCmd(a *app) *cobra.Command {
	o := &runsEndOptions{a: a}
	cmd := &cobra.Command{
		Use: "end RUN",
		Example: `  wmrl runs end r1 --last-step 499
  wmrl runs end r1 --redis redis://redis:6379/0 --redis-prefix lab
  wmrl runs end r1 --last-step 499 --wait 0`,
		Short: "Request a run's end: 'wmrl correct' retires it after its last step",
		Long: `end publishes the end-of-run request of RUN on the run-control topic (<prefix>runs.v1: a
step manifest with "end_of_run": true whose step is the run's last step), keyed by the run.
'wmrl correct' relays it onto the run's steps partition inside its transaction, so its place
among the run's manifests is fixed and a replay sees the end where the live consumer did. Only
principals that may write the run-control topic (trainers, operators; not the generator) can end
a run (docs/security.md); an end-of-run record written straight onto the steps topic is
dead-lettered (end_unauthorized) and ends nothing.

'wmrl correct' retires the run once the last step is sealed: its state leaves memory, its
per-run metric series are deleted, and its end is recorded on the calibration changelog and in
Redis; after 'wmrl correct --ended-run-retention' its changelog keys are tombstoned and its Redis
keys expire. Records of later steps are dead-lettered with reason
run_ended; re-sent records of sealed steps are dropped as duplicates. A run does not resume after
its end: a trainer restarting from a checkpoint re-sends steps that are already sealed, and a
run that must go on needs a new run id.

--last-step names the last step. Without it, the last step sealed in Redis (the state 'wmrl correct'
writes under --redis-prefix) is used: the run ends where it stands. A record naming a step
before one already sealed, or for a run without a manifest before it, or more than the per-run
pending-steps limit of 'wmrl correct' beyond the highest step the run has shown, is
dead-lettered as a conflict and ends nothing; manifests of later steps not yet sealed are
dead-lettered run_ended. 'wmrl generate' publishes the request itself when its input ends.

The command then waits up to --wait for correct's verdict, which correct records in Redis under
--redis-prefix as soon as it reads the request back: "ended after step N" when the run is
retired, "end accepted" when correct holds the end until step N is sealed (exit 0 for both);
refused (a conflict, run_ended, end_unauthorized), it prints the reason and exits 1. No verdict
within --wait (correct not running for this --topic-prefix and --redis-prefix, or behind) exits 3;
the request stays on the run-control topic and is judged when correct reads it. --wait 0 only
publishes the request.`,
		Args: cobra.ExactArgs(1),
		RunE: o.run,
	}
	f := cmd.Flags()
	f.Int64Var(&o.lastStep, "last-step", -1, "the run's last step (default: the last step sealed in Redis)")
	f.StringVar(&o.redisPrefix, "redis-prefix", statestore.DefaultPrefix, "key prefix of the correction state in Redis (as 'wmrl correct --redis-prefix'; under a --topic-prefix other than wmrl.: <prefix>"+statestore.DefaultPrefix+")")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "give up publishing the request after this long")
	f.DurationVar(&o.wait, "wait", 30*time.Second, "wait this long for wmrl correct's verdict on the request (0: publish only)")
	return cmd
}

// errNoSealedStep: the run has no state in Redis, so its last step must be named.
var errNoSealedStep = errors.New("no sealed step in Redis")

func (o *runsEndOptions) run(cmd *cobra.Command, args []string) error {
	a, run := o.a, args[0]
	o.redisPrefix = a.identity(cmd, "redis-prefix", o.redisPrefix, statestore.DefaultPrefix)
	if !topics.ValidID(run) {
		return fmt.Errorf("run id %q is not a valid id (see topics.ValidID)", run)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	last := o.lastStep
	if !cmd.Flags().Changed("last-step") {
		var err error
		if last, err = o.sealedInRedis(ctx, run); err != nil {
			return err
		}
	}
	if last < 0 {
		return fmt.Errorf("--last-step %d: a step is >= 0", last)
	}
	kopts, err := a.kafkaOpts()
	if err != nil {
		return err
	}
	names := a.conn.Names()
	if err := a.requireTopics(kopts, names.Runs()); err != nil {
		return fmt.Errorf("%w%s", err, endDeniedHint(err))
	}
	rec, err := names.EndRequestRecord(run, last, time.Now().UTC())
	if err != nil {
		return err
	}
	var st *statestore.Store
	if o.wait > 0 { // before publishing: the verdict is read from Redis
		rdb, err := a.redis()
		if err != nil {
			return fmt.Errorf("--wait reads wmrl correct's verdict from Redis: %w (--wait 0 publishes without waiting)", err)
		}
		defer rdb.Close()
		st = statestore.New(rdb, o.redisPrefix, 0)
	}
	cl, err := kgo.NewClient(append(kopts, kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	sent, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		return fmt.Errorf("produce the end-of-run request of run %s to %s: %w%s", run, names.Runs(), err, endDeniedHint(err))
	}
	req := topics.EndRequestID(sent.Topic, sent.Partition, sent.Offset)
	if st == nil {
		fmt.Fprintf(a.stdout, "end of run %s after step %d requested (%s); not waiting for wmrl correct's verdict\n", run, last, req)
		return nil
	}
	return o.awaitVerdict(cmd.Context(), st, run, last, req)
}

// verdictPoll is how often `runs end` looks for correct's verdict in Redis.
const verdictPoll = 200 * time.Millisecond

// awaitVerdict waits up to --wait for correct's verdict on request req (see the command's help).
func (o *runsEndOptions) awaitVerdict(ctx context.Context, st *statestore.Store, run string, last int64, req string) error {
	ctx, cancel := context.WithTimeout(ctx, o.wait)
	defer cancel()
	var v *statestore.EndVerdict
	for {
		var err error
		if v, err = st.ReadEndVerdict(ctx, run, req); err != nil && ctx.Err() == nil {
			return err
		}
		if v != nil {
			break
		}
		if !sleepCtx(ctx, verdictPoll) {
			return &exitError{code: 3, err: fmt.Errorf("end of run %s after step %d requested (%s), but wmrl correct gave no verdict within --wait %v: is it running for topic prefix %q with --redis-prefix %q? The request is judged when it reads it",
				run, last, req, o.wait, o.a.conn.Names().Prefix, o.redisPrefix)}
		}
	}
	if !v.Accepted {
		return &exitError{code: 1, err: fmt.Errorf("wmrl correct refused the end of run %s after step %d (reason %s, request %s): %s", run, last, v.Reason, req, v.Detail)}
	}
	// Accepted: the run retires once step last is sealed; wait for that only if it already is
	// (the end is then recorded right after correct's next commit).
	sealed, err := o.sealedInRedis(ctx, run)
	if err != nil {
		sealed = -1
	}
	for sealed >= last {
		if end, err := st.ReadEnd(ctx, run); err == nil && end != nil && end.LastStep == last {
			fmt.Fprintf(o.a.stdout, "run %s ended after step %d\n", run, last)
			return nil
		}
		if !sleepCtx(ctx, verdictPoll) {
			break
		}
	}
	fmt.Fprintf(o.a.stdout, "end of run %s after step %d accepted by wmrl correct (%s); the run ends once step %d is sealed (sealed so far: %d)\n",
		run, last, req, last, sealed)
	return nil
}

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sealedInRedis returns the last step of run that 'wmrl correct' sealed, from its Redis heads
// (the streams of a run advance together; the largest is taken should one lag).
func (o *runsEndOptions) sealedInRedis(ctx context.Context, run string) (int64, error) {
	rdb, err := o.a.redis()
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	st := statestore.New(rdb, o.redisPrefix, 0)
	streams, err := st.Streams(ctx, run)
	if err != nil {
		return 0, fmt.Errorf("run %s: streams: %w", run, err)
	}
	last := int64(-1)
	for _, s := range streams {
		h, err := st.ReadHead(ctx, run, s)
		if err != nil {
			return 0, fmt.Errorf("run %s stream %s: head: %w", run, s, err)
		}
		last = max(last, h.SealedStep)
	}
	if last < 0 {
		return 0, fmt.Errorf("run %s under prefix %q: %w; name the run's last step with --last-step", run, o.redisPrefix, errNoSealedStep)
	}
	return last, nil
}

// endDeniedHint explains a refused end request: the principal may not write the run-control
// topic, which is by design for a generator (docs/security.md, "Who may end a run").
func endDeniedHint(err error) string {
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return " (this principal may not end runs: only trainers and operators may write the run-control topic; see docs/security.md)"
	}
	return ""
}
