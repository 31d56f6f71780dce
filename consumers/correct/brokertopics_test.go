package correct

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// onBroker is where every broker test of the consumer starts: the real broker's seeds, a client
// of the real redis-server (closed when the test ends) and topics of the test's own.
func onBroker(t *testing.T) ([]string, *redis.Client, topics.Names) {
	t.Helper()
	seeds := testenv.Kafka(t)
	rdb := redis.NewClient(mustRedisOpts(t, testenv.Redis(t)))
	t.Cleanup(func() { _ = rdb.Close() })
	names := topics.NewNames(testenv.Name(t) + ".")
	brokerTopics(t, seeds, names)
	return seeds, rdb, names
}

// smallCorrection is the correction the end-to-end tests run: the default with MinPairs 8 (not 200), so
// that their small workloads leave the identity map and exercise the fitted correction.
func smallCorrection() correction.Config {
	cc := correction.DefaultConfig()
	cc.MinPairs = 8
	return cc
}

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
