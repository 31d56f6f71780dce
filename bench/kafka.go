package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
