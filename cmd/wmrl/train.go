package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/stage"

	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newTrainCmd) }

// trainOptions holds train's flags; its run method is the command's body.
type trainOptions struct {
	a            *app
	runID, group string
	redisPrefix  string
	printTable   bool
	maxSteps     int
	metricsAddr  string
	session      time.Duration
}

func newTrainCmd(a *app) *cobra.Command {
	o := &trainOptions{a: a}
	cmd := &cobra.Command{
		Use: "train",
		Example: `  wmrl train --run r1
  wmrl train --run r1 --print --max-steps 3 --group trainer-r1`,
		Short: "Consume fused advantages step by step and acknowledge them (a trainer without a model)",
		Long: `train reads the advantages topic read_committed in a consumer group, reassembles each step
from its Arrow chunks and acknowledges it after printing, so offsets are committed only for steps
that were shown. Without --print it prints one summary line per step (rows, masked rows, mean
|advantage| over rows that count, mean anchor weight); with --print the step's rows as a table.
A real trainer uses the same code through the sinks/trainer package (Stream.Next / Step.Ack).

With --run, the default group is the run's own (wmrl-trainer-<run>), so trainers of two runs never
split the topic's partitions. Every few seconds train checks that the run's partition is held by
this trainer (or another trainer of the same run) and warns, naming the partition, the member
holding it and the --group to use, while it is not, or while its group has consumers of other
runs. When 'wmrl correct' has ended the run (read from Redis, --redis-prefix), train exits 0 once
the run's last step is acknowledged.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringVar(&o.runID, "run", "", "run id to consume (empty: every run)")
	f.StringVar(&o.group, "group", trainer.DefaultGroup, "consumer group (default with --run: "+trainerGroupBase(trainer.DefaultGroup, "<run>")+", one group per run; under a --topic-prefix other than wmrl.: <prefix>"+trainerGroupBase(trainer.DefaultGroup, "<run>")+")")
	f.StringVar(&o.redisPrefix, "redis-prefix", statestore.DefaultPrefix, "key prefix of the correction state in Redis, where train learns that its run ended (as 'wmrl correct --redis-prefix'; under a --topic-prefix other than wmrl.: <prefix>"+statestore.DefaultPrefix+")")
	f.BoolVar(&o.printTable, "print", false, "print every step as a table of its rows")
	f.IntVar(&o.maxSteps, "max-steps", 0, "stop after this many steps (0: run until interrupted)")
	f.DurationVar(&o.session, "session-timeout", 0, "group session timeout: how long a crashed trainer holds its partitions (0: franz-go's 45s)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9467 (:9467 for every interface; empty: off)")
	return cmd
}

func (o *trainOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	if o.maxSteps < 0 {
		return fmt.Errorf("--max-steps %d must be >= 0", o.maxSteps)
	}
	opts, err := a.kafkaOpts()
	if err != nil {
		return err
	}
	if err := a.requireTopics(opts, a.conn.Names().Advantages()); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	reg := prometheus.NewRegistry()
	m, err := newTrainMetrics(reg)
	if err != nil {
		return err
	}
	stop, err := serveSink(ctx, o.metricsAddr, reg, opts, a.log)
	if err != nil {
		return err
	}
	defer stop()
	connOpts := opts // without the metrics hooks, for the wiring check's own clients
	opts = append(opts[:len(opts):len(opts)], kgo.WithHooks(stage.KafkaMetrics(reg, "train")...))
	if o.session > 0 {
		opts = append(opts, kgo.SessionTimeout(o.session))
	}
	skipped := oversize.NewCounter("train")
	if err := reg.Register(skipped); err != nil {
		return err
	}
	fix := tenantName(a.conn.TopicPrefix, trainerGroupBase(trainer.DefaultGroup, o.runID))
	s, err := trainer.New(trainer.Config{KafkaOpts: opts, Names: a.conn.Names(), Group: a.groupFor(cmd, o.group, trainerGroupBase(trainer.DefaultGroup, o.runID)), RunID: o.runID, Logger: a.log,
		ClientID:      a.setClientID(),
		MaxBatchBytes: a.conn.BatchLimit(topics.MaxAdvantageBytes), BatchesSkipped: skipped})
	if err != nil {
		return err
	}
	defer s.Close()
	var gotStep atomic.Bool
	wiring := o.watchWiring(ctx, connOpts, &gotStep)
	defer wiring.Stop()
	runCtx, runDone := context.WithCancelCause(ctx)
	defer runDone(nil)
	w, err := o.startWatch(runCtx, cmd, connOpts, s, fix, runDone)
	if err != nil {
		return err
	}
	if err := o.consume(ctx, runCtx, s, w, m, &gotStep); err != nil {
		return err
	}
	stats := s.Stats()
	a.log.Info("train done", "steps", stats.Steps, "rows", stats.Rows, "duplicates", stats.Duplicates,
		"skipped", stats.Skipped, "abandoned", stats.Abandoned, "skipped_batches", stats.SkippedBatches)
	return nil
}

// watchWiring makes a trainer that gets no step within wiringDelay say what may be miswired (a
// wrong run or prefix, no correction consumer) instead of waiting without a word. gotStep is
// set by the consume loop; the returned timer is stopped when train ends.
func (o *trainOptions) watchWiring(ctx context.Context, connOpts []kgo.Opt, gotStep *atomic.Bool) *time.Timer {
	a := o.a
	return time.AfterFunc(wiringDelay, func() {
		if gotStep.Load() {
			return
		}
		problems, err := wiringProblems(ctx, connOpts, a.conn.Names(), o.runID)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("no step yet; could not check the wiring", "err", err)
			}
			return
		}
		if gotStep.Load() {
			return
		}
		for _, p := range problems {
			a.log.Warn("no step yet: "+p, "run", o.runID, "waited", wiringDelay)
		}
	})
}

// consume shows and acknowledges steps until --max-steps, a stop (runCtx ends: a signal, or
// the run-end watch w), or, when w watches the run, its last step is acknowledged.
func (o *trainOptions) consume(ctx, runCtx context.Context, s *trainer.Stream, w *trainWatch, m *trainMetrics, gotStep *atomic.Bool) error {
	a := o.a
	for n := 0; o.maxSteps == 0 || n < o.maxSteps; n++ {
		st, err := s.Next(runCtx)
		if err != nil {
			if runCtx.Err() != nil && errors.Is(err, runCtx.Err()) {
				return nil
			}
			return err
		}
		gotStep.Store(true)
		if err := showStep(a, st, o.printTable); err != nil {
			return err
		}
		if err := st.Ack(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		m.steps.Inc()
		m.rows.Add(float64(len(st.Rows)))
		m.lastStep.Set(float64(st.Step))
		if w != nil && w.stepEndsRun(st) {
			e := w.end.Load()
			a.log.Info("run ended and its last step is acknowledged: train exits", "run", st.Run, "last_step", e.LastStep, "reason", e.Reason)
			return nil
		}
	}
	return nil
}

func showStep(a *app, st *trainer.Step, table bool) error {
	s := st.Summary()
	weight := "-"
	if !math.IsNaN(s.AnchorWeight) {
		weight = fmt.Sprintf("%.4f", s.AnchorWeight)
	}
	if _, err := fmt.Fprintf(a.stdout, "run %s step %d rows %d masked %d mean|adv| %.4f anchor-weight %s fit %d chunks %d\n",
		st.Run, st.Step, s.Rows, s.Masked, s.MeanAbsAdvantage, weight, s.CalibrationVersion, len(st.Records)); err != nil {
		return err
	}
	warnMasked(a, st, s.Masked)
	if !table {
		return nil
	}
	if err := trainer.WriteTable(a.stdout, st); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.stdout)
	return err
}

// warnMasked says on stderr, per step, that rows are masked and why: a masked row carries no
// gradient, and a step of masked rows (a judge that is down, a missing sandbox script) would
// otherwise look like any other step in the summary line.
func warnMasked(a *app, st *trainer.Step, masked int) {
	if masked == 0 {
		return
	}
	noReward, stale := 0, 0
	for _, r := range st.Rows {
		switch {
		case r.Mask:
		case r.MaskReason == topics.MaskStale:
			stale++
		default:
			noReward++
		}
	}
	msg := "rows masked: no usable reward (world-model or sandbox failures; see their logs and /healthz/scoring) or stale"
	if masked == len(st.Rows) {
		msg = "every row of the step is masked: it trains on nothing (world-model or sandbox failures; see their logs and /healthz/scoring)"
	}
	a.log.Warn(msg, "run", st.Run, "step", st.Step, "masked", masked, "rows", len(st.Rows), "no_reward", noReward, "stale", stale)
}

// startWatch starts, for a trainer of one run, the checks of trainWatch on a goroutine of their
// own (the Redis connection, which only the end needs, is made there, so a missing Redis costs
// the end detection and a warning, not the trainer). Nil without --run.
func (o *trainOptions) startWatch(ctx context.Context, cmd *cobra.Command, opts []kgo.Opt, s *trainer.Stream, fix string, done func(error)) (*trainWatch, error) {
	if o.runID == "" {
		return nil, nil
	}
	a := o.a
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	context.AfterFunc(ctx, cl.Close)
	w := &trainWatch{log: a.log, adm: kadm.NewClient(cl), opts: opts, stream: s, topic: s.Topic(), run: o.runID, fix: fix,
		warned: map[string]time.Time{}}
	prefix := a.identity(cmd, "redis-prefix", o.redisPrefix, statestore.DefaultPrefix)
	go func() {
		rdb, err := a.redis()
		if err != nil {
			a.log.Warn("cannot watch for the run's end (train runs until interrupted or --max-steps)", "run", o.runID, "err", err)
		} else {
			context.AfterFunc(ctx, func() { _ = rdb.Close() })
			w.ends = statestore.New(rdb, prefix, 0)
		}
		w.watch(ctx, done)
	}()
	return w, nil
}

// setClientID is --client-id when the user set one (flag, environment or config file), else empty:
// a trainer's default client id names its run (trainer.ClientID), which the group checks of other
// trainers read.
func (a *app) setClientID() string {
	if a.conn.ClientID == defaultClientID {
		return ""
	}
	return a.conn.ClientID
}
