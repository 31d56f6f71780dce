package demo

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/sim"
)

// The same demo against the real broker and Redis: three short steps, two groups, every arm
// reproducing the simulation exactly.
func TestDemoAgainstRealServices(t *testing.T) {
	brokers := testenv.Kafka(t)
	ro, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() }) // after cleanupRedis, which runs first
	ctx := testContext(t)
	cfg := tinyConfig()
	cfg.Sim.Steps, cfg.Sim.Groups = 3, 2
	cfg.KafkaOpts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	cfg.Redis = rdb
	name := testenv.Name(t)
	cfg.TopicPrefix = name + "."
	cfg.RedisPrefix = name
	t.Cleanup(func() { cleanupBroker(t, brokers, cfg.TopicPrefix) })
	t.Cleanup(func() { cleanupRedis(t, rdb, cfg.RedisPrefix) })
	out, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if out.Embedded {
		t.Fatal("ran embedded")
	}
	eval, err := sim.Eval(ctx, cfg.EvalProblems, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, arm := range Arms(cfg.AnchorFraction) {
		want, err := sim.Run(ctx, cfg.Sim, arm, eval, cfg.Seed, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := out.Results[i]
		if got.FinalScore() != want.FinalScore() || got.State.Digest() != want.State.Digest() ||
			got.Steps[len(got.Steps)-1].Executions != want.Steps[len(want.Steps)-1].Executions {
			t.Errorf("%s: pipeline final %v, sim %v (or state/executions differ)", arm.Name, got.FinalScore(), want.FinalScore())
		}
	}
	t.Log(out.FinalLine, out.Elapsed)
}

// cleanupBroker deletes the topics and consumer groups the demo made under prefix on the shared
// broker. Finding none is an error: the demo creates seven topics per arm there, so an empty
// match means the cleanup looks in the wrong place.
func cleanupBroker(t *testing.T, brokers []string, prefix string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Errorf("cleanup: kafka client: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if groups, err := adm.ListGroups(ctx); err != nil {
		t.Errorf("cleanup: list groups: %v", err)
	} else if ours := withPrefix(groups.Groups(), prefix); len(ours) > 0 {
		resps, err := adm.DeleteGroups(ctx, ours...)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			t.Errorf("cleanup: delete groups %v: %v", ours, err)
		}
	}
	all, err := adm.ListTopics(ctx)
	if err != nil {
		t.Errorf("cleanup: list topics: %v", err)
		return
	}
	ours := withPrefix(all.Names(), prefix)
	if len(ours) == 0 {
		t.Errorf("cleanup: no topics under %q", prefix)
		return
	}
	resps, err := adm.DeleteTopics(ctx, ours...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Errorf("cleanup: delete topics %v: %v", ours, err)
	}
}

// cleanupRedis unlinks every key under prefix; as with the topics, none found is an error.
func cleanupRedis(t *testing.T, rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var keys []string
	it := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Errorf("cleanup: scan redis %s*: %v", prefix, err)
		return
	}
	if len(keys) == 0 {
		t.Errorf("cleanup: no redis keys under %q", prefix)
		return
	}
	for chunk := range slices.Chunk(keys, 500) {
		if err := rdb.Unlink(ctx, chunk...).Err(); err != nil {
			t.Errorf("cleanup: unlink redis keys: %v", err)
			return
		}
	}
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
