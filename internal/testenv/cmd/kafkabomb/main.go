// Command kafkabomb writes one decompression-bomb record batch (see testenv.ProduceBomb) to a
// topic partition and prints where it landed as JSON, for tests outside Go (the Python client's):
//
//	go run ./internal/testenv/cmd/kafkabomb --brokers 127.0.0.1:9092 --topic t --partition 0 --bytes 268435456
//
// It is test support, not an operator tool: it exists to attack a test cluster.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafkabomb:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o         conn.Options
		brokers   string
		topic     string
		partition int
		size      int
		timeout   time.Duration
	)
	flag.StringVar(&brokers, "brokers", "", "comma-separated seed brokers (required)")
	flag.StringVar(&topic, "topic", "", "topic to write the bomb to (required)")
	flag.IntVar(&partition, "partition", 0, "partition to write the bomb to")
	flag.IntVar(&size, "bytes", 256<<20, "the batch decompresses to at least this many bytes")
	flag.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	flag.StringVar(&o.SASLMechanism, "sasl-mechanism", "", "SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
	flag.StringVar(&o.SASLUser, "sasl-user", "", "SASL user")
	flag.StringVar(&o.SASLPassword, "sasl-password", "", "SASL password")
	flag.BoolVar(&o.TLS, "tls", false, "connect with TLS")
	flag.StringVar(&o.TLSCA, "tls-ca", "", "CA file for the broker's certificate")
	flag.Parse()
	if topic == "" {
		return fmt.Errorf("--topic is required")
	}
	o.Brokers = strings.Split(brokers, ",")
	opts, err := o.KafkaOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ref, err := testenv.ProduceBomb(ctx, cl, topic, int32(partition), size)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(ref)
}
