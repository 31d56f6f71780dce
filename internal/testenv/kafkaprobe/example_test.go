package kafkaprobe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv/kafkaprobe"
)

// Describe tells which Kafka release a cluster runs; CommitTransactional
// proves its transaction coordinator works. Together they are the local
// broker's readiness gate (deploy/local/kafkaready).
func Example() {
	seeds := []string{"127.0.0.1:9092"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	info, err := kafkaprobe.Describe(ctx, cl)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Kafka", info.Release())

	if err := kafkaprobe.CommitTransactional(ctx, seeds, "wmrl.__ready"); err != nil {
		fmt.Println(err)
	}
}
