// Command kafkaready waits until a Kafka cluster answers metadata and can
// commit a transaction, then prints what the broker reports about its
// version. deploy/local/kafka.sh runs it after starting the broker because an
// open port alone does not mean the transaction coordinator works, and every
// wmrl stage that matters depends on it.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/retry"
	"github.com/wmrl/wmrl/internal/testenv/kafkaprobe"
)

func main() {
	port := os.Getenv("WMRL_KAFKA_PORT")
	port = cmp.Or(port, "9092")
	brokers := flag.String("brokers", "127.0.0.1:"+port, "comma-separated seed brokers")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	topic := flag.String("topic", "wmrl.__ready", "topic that receives the transactional probe record")
	minBrokers := flag.Int("min-brokers", 1, "wait until the metadata lists at least this many brokers (a cluster's nodes register one by one)")
	flag.Parse()

	if err := run(strings.Split(*brokers, ","), *topic, *timeout, *minBrokers); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaready: %v\n", err)
		os.Exit(1)
	}
}

func run(seeds []string, topic string, timeout time.Duration, minBrokers int) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	info, err := waitMetadata(ctx, seeds, minBrokers)
	if err != nil {
		return fmt.Errorf("no metadata from %s within %s: %w", strings.Join(seeds, ","), timeout, err)
	}
	fmt.Printf("kafkaready: metadata after %.1fs: %s\n", time.Since(start).Seconds(), info)
	if r := info.Release(); r != "" {
		fmt.Printf("kafkaready: broker reports Kafka %s\n", r)
	}

	if err := kafkaprobe.CommitTransactional(ctx, seeds, topic); err != nil {
		return fmt.Errorf("broker answers metadata but no transaction committed within %s: %w", timeout, err)
	}
	fmt.Printf("kafkaready: transactional produce to %s committed and read back after %.1fs\n", topic, time.Since(start).Seconds())
	return nil
}

// waitMetadata retries because the broker refuses connections until its
// listeners are up, and a fresh client has no backoff we can shorten.
func waitMetadata(ctx context.Context, seeds []string, minBrokers int) (info kafkaprobe.Info, err error) {
	var last error
	_, err = retry.Forever(ctx, backoff.NewConstantBackOff(250*time.Millisecond), func() error {
		if info, last = describeOnce(ctx, seeds); last == nil && len(info.Brokers) < minBrokers {
			last = fmt.Errorf("metadata lists %d brokers, want %d", len(info.Brokers), minBrokers)
		}
		return last
	}, nil)
	if err != nil {
		return kafkaprobe.Info{}, errors.Join(err, last)
	}
	return info, nil
}

func describeOnce(ctx context.Context, seeds []string) (kafkaprobe.Info, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestRetries(0))
	if err != nil {
		return kafkaprobe.Info{}, fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return kafkaprobe.Describe(actx, cl)
}
