package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// stageRunner is a stage (sandbox.Stage, worldmodel.Stage) as the benchmarks drive it.
type stageRunner interface{ Run(context.Context) error }

// runStageUntil runs st until n records are on topic and returns when the last arrived; the
// stage is stopped either way and its own error reported when the wait succeeded.
func runStageUntil(ctx context.Context, st stageRunner, seeds []kgo.Opt, topic string, n int) (time.Time, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- st.Run(runCtx) }()
	end, err := awaitRecords(ctx, seeds, topic, n)
	stop()
	if rerr := <-runErr; err == nil {
		err = rerr
	}
	return end, err
}

// produceRollouts writes n rollouts like tmpl, eight to a group, over runs run ids (so over
// the partitions when runs is their count).
func produceRollouts(ctx context.Context, seeds []kgo.Opt, names topics.Names, n, runs int, tmpl topics.Rollout) error {
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		g := strconv.Itoa(i / 8)
		r := tmpl
		r.RunID, r.GroupID, r.RolloutID, r.Stream = "bench-"+strconv.Itoa(i%runs), g, g+"-"+strconv.Itoa(i%8), "main"
		r.Index, r.CreatedAt = i%8, time.Now()
		rec, err := names.RolloutRecord(r)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce rollouts: %w", err)
	}
	return nil
}

func awaitRecords(ctx context.Context, seeds []kgo.Opt, topic string, n int) (time.Time, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return time.Time{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	got := 0
	for got < n {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%d of %d records on %s: %w", got, n, topic, ctx.Err())
		}
		got += f.NumRecords()
	}
	return time.Now(), nil
}
