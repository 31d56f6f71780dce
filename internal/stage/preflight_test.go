package stage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// TestCheckKafkaUnreachable needs no broker: a closed port must fail fast with a fix.
func TestCheckKafkaUnreachable(t *testing.T) {
	start := time.Now()
	err := CheckKafka(context.Background(), KafkaCheck{
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, Brokers: "127.0.0.1:1",
		Topics: []string{"wmrl.rollouts.v1"}, Timeout: 3 * time.Second,
	})
	if !errors.Is(err, ErrPreflight) {
		t.Fatalf("err = %v, want ErrPreflight", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v, want about the 3s timeout", el)
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "--brokers") || strings.Contains(msg, "\n") {
		t.Fatalf("message %q: want one line naming the address and --brokers", msg)
	}
}

// TestCheckKafkaTopics runs against the real broker: missing topics and mismatched partition
// counts are each reported with their fix, a correct layout passes.
func TestCheckKafkaTopics(t *testing.T) {
	brokers := testenv.Kafka(t)
	prefix := testenv.Name(t) + "."
	names := topics.NewNames(prefix)
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	check := func(need ...string) error {
		return CheckKafka(context.Background(), KafkaCheck{KafkaOpts: opts, Names: names, Topics: need, Timeout: 20 * time.Second})
	}
	if err := check(names.Rollouts()); !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), names.Rollouts()+" does not exist") || !strings.Contains(err.Error(), "wmrl topics create") {
		t.Fatalf("missing topic: %v", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan := topicadmin.DefaultPlan(names)
	plan.Partitions = 2
	if _, err := topicadmin.Create(ctx, adm, plan); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), names.All()...) })
	if err := check(names.Rollouts(), names.Predicted(), names.DLQ()); err != nil {
		t.Fatalf("good layout: %v", err)
	}
	// A co-partitioned topic with another count breaks the join by run.
	if _, err := adm.CreatePartitions(ctx, 1, names.Executed()); err != nil {
		t.Fatal(err)
	}
	err = check(names.Rollouts(), names.Predicted(), names.Executed())
	if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "co-partitioning") {
		t.Fatalf("mismatched partitions: %v", err)
	}
}

func TestCheckRedis(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	err := CheckRedis(context.Background(), dead, 3*time.Second)
	if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("dead redis: %v", err)
	}
	opt, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	live := redis.NewClient(opt)
	defer live.Close()
	if err := CheckRedis(context.Background(), live, 10*time.Second); err != nil {
		t.Fatalf("live redis: %v", err)
	}
}
