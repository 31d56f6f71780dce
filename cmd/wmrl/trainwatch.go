package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// trainWatchEvery is how often a trainer of one run checks its group's assignment and the run's
// end: a miswired group is named within seconds, and the checks are two metadata requests.
const trainWatchEvery = 3 * time.Second

// trainWarnEvery rate-limits a repeated warning: it is said again while the problem lasts, so an
// operator who looks at the log later still sees it, but not at every check.
const trainWarnEvery = 30 * time.Second

// finishedReadMax bounds the read that decides whether anything of an ended run is left: a group
// further behind than this many records has work left anyway.
const finishedReadMax = 10000

// errRunDone ends a trainer's loop when its run ended and no record of it is left for the group.
var errRunDone = errors.New("run ended; every step acknowledged")

// trainWatch watches, for `wmrl train --run`, what the stream cannot see from its records: that
// the run's records sit on a partition another member of the group holds (a group shared with
// trainers of other runs, which filter them out), and that the run ended.
type trainWatch struct {
	log    *slog.Logger
	adm    *kadm.Client
	opts   []kgo.Opt // connection options, for the bounded reads of the run's partition
	stream interface {
		Member() (group, memberID string)
	}
	topic  string
	run    string
	fix    string            // the --group that gives the run a group of its own
	ends   *statestore.Store // nil: the end is not watched (no Redis)
	end    atomic.Pointer[statestore.RunEnd]
	warned map[string]time.Time
}

// watch checks every trainWatchEvery until ctx ends; it calls done when the run ended and no
// record of it is left after the group's committed offset.
func (w *trainWatch) watch(ctx context.Context, done func(error)) {
	t := time.NewTicker(trainWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		problems, err := w.membership(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Debug("could not check the group's assignment", "err", err)
		}
		for _, p := range problems {
			w.warn(p)
		}
		if w.ends == nil {
			continue
		}
		finished, err := w.finished(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Debug("could not check the run's end", "err", err)
		case finished:
			e := w.end.Load()
			w.log.Info("run ended and no step of it is left for this group: train exits", "run", w.run,
				"last_step", e.LastStep, "reason", e.Reason)
			done(errRunDone)
			return
		}
	}
}

// warn logs msg when it was not logged within trainWarnEvery.
func (w *trainWatch) warn(msg string) {
	now := time.Now()
	if at, ok := w.warned[msg]; ok && now.Sub(at) < trainWarnEvery {
		return
	}
	w.warned[msg] = now
	w.log.Warn(msg, "run", w.run, "repeats_every", trainWarnEvery)
}

// runPartition is the partition of the advantages topic that holds the run's records: correct
// writes them to the partition number of the run's inputs, which wmrl's producers key by run.
func (w *trainWatch) runPartition(ctx context.Context) (int32, error) {
	td, err := w.adm.ListTopics(ctx, w.topic)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", w.topic, err)
	}
	d, ok := td[w.topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s not found", w.topic)
	}
	return topics.PartitionFor(w.run, len(d.Partitions)), nil
}

// membership names, once the group is stable, a member of another run (or of unknown run) that
// holds the run's partition, and the members of other runs in the group.
func (w *trainWatch) membership(ctx context.Context) ([]string, error) {
	group, me := w.stream.Member()
	if me == "" {
		return nil, nil
	}
	p, err := w.runPartition(ctx)
	if err != nil {
		return nil, err
	}
	described, err := w.adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := described[group]
	if !ok || g.Err != nil {
		return nil, fmt.Errorf("describe group %s: %v", group, g.Err)
	}
	if g.State != "Stable" {
		return nil, nil // a rebalance is under way: its outcome is checked next time
	}
	var problems, others []string
	var mine []int32
	for _, m := range g.Members {
		var held []int32
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == w.topic {
					held = append(held, t.Partitions...)
				}
			}
		}
		run, known := trainer.RunOfClientID(m.ClientID)
		serves := describeConsumer(run, known)
		if m.MemberID == me {
			mine = held
			continue
		}
		if !known || run != w.run {
			others = append(others, fmt.Sprintf("%s on %s (%s)", m.ClientID, m.ClientHost, serves))
		}
		if slices.Contains(held, p) && (!known || run != w.run) {
			problems = append(problems, fmt.Sprintf(
				"run %s's records sit on partition %s/%d, which group %s gave to member %s on %s (%s), not to this trainer; it gets none of the run's steps: give each run its own group, e.g. --group %s",
				w.run, w.topic, p, group, m.ClientID, m.ClientHost, serves, w.fix))
		}
	}
	if len(others) > 0 {
		slices.Sort(mine)
		problems = append(problems, fmt.Sprintf(
			"group %s is shared with consumers of other runs: %s; a run's records go to the one member holding its partition (this trainer holds %s/%v; run %s's are on %d), which drops other runs' records: give each run its own group, e.g. --group %s",
			group, strings.Join(others, ", "), w.topic, mine, w.run, p, w.fix))
	}
	return problems, nil
}

// describeConsumer says which run a group member consumes, from its client id.
func describeConsumer(run string, known bool) string {
	switch {
	case !known:
		return "not a wmrl trainer stream, or a custom client id: its run is unknown"
	case run == "":
		return "a trainer of every run"
	default:
		return "a trainer of run " + run
	}
}

// finished reports whether the run ended and no record of it sits at or after the group's
// committed offset on its partition: then every step of it was acknowledged (this session or an
// earlier one). correct records the end in Redis after the transaction of the run's last step
// commits, so that step's records are already readable.
func (w *trainWatch) finished(ctx context.Context) (bool, error) {
	e := w.end.Load()
	if e == nil {
		var err error
		if e, err = w.ends.ReadEnd(ctx, w.run); err != nil || e == nil {
			return false, err
		}
		w.end.Store(e)
	}
	group, _ := w.stream.Member()
	p, err := w.runPartition(ctx)
	if err != nil {
		return false, err
	}
	offs, err := w.adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	committed := int64(0)
	if o, ok := offs.Lookup(w.topic, p); ok && o.Err == nil && o.At >= 0 {
		committed = o.At
	}
	ends, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		return false, fmt.Errorf("end offsets of %s: %w", w.topic, err)
	}
	if e, ok := ends.Lookup(w.topic, p); ok && e.Err == nil && e.Offset-committed > finishedReadMax {
		return false, nil // the trainer is still well behind: no bounded read can settle it yet
	}
	from := kgo.NewOffset().At(committed)
	left := 0
	start := map[string]map[int32]kgo.Offset{w.topic: {p: from}}
	err = topicread.ToEnd(ctx, w.opts, start, 0, w.log, func(r *kgo.Record) error {
		if id, ok := topics.HeaderValue(r.Headers, topics.HeaderRun); ok && id == w.run {
			left++
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read %s/%d: %w", w.topic, p, err)
	}
	return left == 0, nil
}

// stepEndsRun reports whether st is the ended run's last step (or beyond it).
func (w *trainWatch) stepEndsRun(st *trainer.Step) bool {
	e := w.end.Load()
	return e != nil && st.Run == w.run && st.Step >= e.LastStep
}
