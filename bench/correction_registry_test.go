package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// With a registry the benchmark's input is Confluent-framed and the correction consumer, which
// checks every id, still seals every step (embedded kfake, miniredis, srfake).
func TestCorrectionFramedSmoke(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	fake := schemareg.NewDouble()
	defer fake.Close()
	reg, err := schemareg.New(schemareg.Config{URLs: []string{fake.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	cc := correction.DefaultConfig()
	cc.MinPairs = 8
	w := workload.Config{Runs: 1, Steps: 3, Groups: 4, GroupSize: 4, AnchorEvery: 2, Streams: 1, Seed: 38}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Correction(ctx, CorrectionConfig{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, Redis: rdb,
		Workload: w, Partitions: 1, LatencySteps: 1, Correction: cc, Format: topics.FormatProtobuf, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SealedSteps != w.Runs*w.Steps {
		t.Fatalf("sealed %d steps, want %d", rep.SealedSteps, w.Runs*w.Steps)
	}
	// The benchmark's topics were registered, so its input records were framed with their ids.
	subjects, err := reg.Client().Subjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(subjects, func(s string) bool { return strings.HasSuffix(s, topics.SuffixPredicted+"-value") }) {
		t.Fatalf("no predicted-rewards subject registered: %v", subjects)
	}
}
