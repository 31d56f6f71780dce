package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real Redis, holding nothing under the consumer's prefix (as after a restart without
// persistence): a run whose step sealed a minute ago shows "Redis lost this run's head;
// rebuilding", not "no head record yet"; once its end record arrives, the missing head is an
// ended run's expired keys.
func TestFollowerRedisLostHead(t *testing.T) {
	url := testenv.Redis(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	empty := testenv.Name(t) // a Redis prefix nothing was written under
	f, err := NewFollower(Config{KafkaOpts: []kgo.Opt{seeds}, TopicPrefix: "t.", Redis: rdb, PollInterval: 100 * time.Millisecond,
		RedisPrefix: func(string) string { return empty }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	prod, err := kgo.NewClient(seeds, kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	names := topics.NewNames("t.a.")
	rec, err := names.CalibrationRecord(topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 3, Digest: "d", AnchorWeight: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec.Timestamp = time.Now().Add(-time.Minute)
	if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitHead := func(state, prefix string) {
		t.Helper()
		for {
			st := f.Model().State()
			if len(st.Runs) == 1 && st.Runs[0].Redis != nil && st.Runs[0].Redis.State == state {
				if h := st.Runs[0].Redis; len(h.Error) < len(prefix) || h.Error[:len(prefix)] != prefix {
					t.Fatalf("head %+v, want error %q…", h, prefix)
				}
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no head state %s: %+v", state, st.Runs)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitHead(HeadLost, "Redis lost this run's head; rebuilding")
	end, err := names.CalibrationEndRecord(topics.CalibrationEnd{RunID: "r", LastStep: 3, EndedAt: time.Now(), Reason: topics.EndReasonIdle})
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, end).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitHead(HeadGone, "run ended (idle, after step 3)")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
