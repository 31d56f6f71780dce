package demo

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tinyConfig()
	cfg.Sim.Steps, cfg.Sim.Groups = 3, 2
	cfg.KafkaOpts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	cfg.Redis = rdb
	name := testenv.Name(t)
	cfg.TopicPrefix = name + "."
	cfg.RedisPrefix = name
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
