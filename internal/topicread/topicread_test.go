package topicread

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPartitions: a whole-topic read starts every partition of an existing topic at the log
// start; a missing topic is an error that says so.
func TestPartitions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	ctx := context.Background()
	start, err := Partitions(ctx, opts, "t")
	if err != nil || len(start) != 1 || len(start["t"]) != 3 {
		t.Fatalf("partitions of t: %v %v", start, err)
	}
	for p := range int32(3) {
		if o, ok := start["t"][p]; !ok || o.EpochOffset().Offset != kgo.NewOffset().AtStart().EpochOffset().Offset {
			t.Fatalf("partition %d starts at %v (present %v), want the log start", p, o, ok)
		}
	}
	if _, err := PartitionCount(ctx, opts, "absent"); err == nil || !strings.Contains(err.Error(), "topic absent not found") {
		t.Fatalf("missing topic: %v", err)
	}
}
