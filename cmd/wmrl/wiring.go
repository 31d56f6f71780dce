package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
)

// wiringDelay is how long a trainer may wait for its first step before wmrl says what may be
// miswired: long enough for a healthy pipeline's first step, short enough that a wrong run id or
// prefix is named while the operator still watches.
const wiringDelay = 5 * time.Second

// wiringTail is how many records per partition of the advantages topic the run check reads (the
// newest ones): a bound, so the check stays cheap on a long topic.
const wiringTail = 500

// wiringProblems names what keeps a trainer of run (empty: any run) on names' topics from
// getting steps, as one line each: the advantages topic holds no record of the run (listing the
// runs it does hold, as the Python client's UnknownRunError does), and no consumer group with
// live members reads the correction consumer's inputs. Nil means nothing found.
func wiringProblems(ctx context.Context, opts []kgo.Opt, names topics.Names, run string) ([]string, error) {
	var problems []string
	adv := names.Advantages()
	start, err := topicread.Partitions(ctx, opts, adv)
	if err != nil {
		return nil, err
	}
	for _, ps := range start {
		for p := range ps {
			ps[p] = kgo.NewOffset().AtEnd().Relative(-wiringTail)
		}
	}
	runs := map[string]int{}
	records := 0
	err = topicread.ToEnd(ctx, opts, start, 0, nil, func(r *kgo.Record) error {
		records++
		if id, ok := topics.HeaderValue(r.Headers, topics.HeaderRun); ok {
			runs[id]++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", adv, err)
	}
	switch {
	case records == 0:
		problems = append(problems, fmt.Sprintf("topic %s holds no advantages yet", adv))
	case run != "" && runs[run] == 0:
		seen := slices.SortedFunc(maps.Keys(runs), func(a, b string) int { return runs[b] - runs[a] })
		if len(seen) > 16 {
			seen = append(seen[:16], "…")
		}
		problems = append(problems, fmt.Sprintf("topic %s holds no record of run %q in its last %d records per partition; runs seen: %s (check --run and --topic-prefix)",
			adv, run, wiringTail, strings.Join(seen, ", ")))
	}
	readers, err := liveReaders(ctx, opts, names.Predicted())
	if err != nil {
		return nil, err
	}
	if len(readers) == 0 {
		problems = append(problems, fmt.Sprintf("no consumer group with live members reads %s: is `wmrl correct --topic-prefix %s` running?",
			names.Predicted(), names.Prefix))
	}
	return problems, nil
}

// liveReaders lists the consumer groups that have a member assigned a partition of topic.
func liveReaders(ctx context.Context, opts []kgo.Opt, topic string) ([]string, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list consumer groups: %w", err)
	}
	if len(listed) == 0 {
		return nil, nil
	}
	lags, err := adm.Lag(ctx, listed.Groups()...)
	if err != nil {
		return nil, fmt.Errorf("consumer group lag: %w", err)
	}
	var out []string // lags.Sorted is by group name
	for _, g := range lags.Sorted() {
		for _, l := range g.Lag[topic] {
			if !l.IsEmpty() {
				out = append(out, g.Group)
				break
			}
		}
	}
	return out, nil
}
