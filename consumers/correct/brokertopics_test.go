package correct

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// brokerTopics creates names' topics on the real broker (one hour retention) and deletes them
// when the test ends.
func brokerTopics(tb testing.TB, seeds []string, names topics.Names) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		tb.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plan := topicadmin.DefaultPlan(names)
	plan.RetentionMS = 3600 * 1000
	if _, err := topicadmin.Create(ctx, adm, plan); err != nil {
		cl.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names.All()...)
		cl.Close()
	})
}
