// Package testenv hands integration tests the addresses of the real Kafka
// broker and Redis server they run against, and decides whether a missing
// service is a skip (a developer's quick `go test`) or a failure (CI and
// `make test`, where a silently skipped integration test would be a lie).
//
// Addresses come from the environment:
//
//	WMRL_TEST_KAFKA        comma-separated seed brokers, e.g. 127.0.0.1:9092
//	WMRL_TEST_REDIS        Redis URL, e.g. redis://127.0.0.1:6379/0
//	WMRL_REQUIRE_SERVICES  1 (or CI=true): unset or unreachable fails the test
//
// `make test` starts both services (deploy/local/services.sh) and sets all three.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv/kafkaprobe"
	"github.com/wmrl/wmrl/topics"
)

// Environment variables read by this package.
const (
	EnvKafka   = "WMRL_TEST_KAFKA"
	EnvRedis   = "WMRL_TEST_REDIS"
	EnvRequire = "WMRL_REQUIRE_SERVICES"
)

const howToRun = "run `make test`, or `deploy/local/services.sh up` and then " +
	"WMRL_TEST_KAFKA=127.0.0.1:9092 WMRL_TEST_REDIS=redis://127.0.0.1:6379/0 go test ./..."

// reachTimeout bounds the one reachability check per address and process.
const reachTimeout = 10 * time.Second

// Required reports whether missing services must fail tests rather than
// skip them: in CI (CI=true) and when WMRL_REQUIRE_SERVICES is set to a true
// value.
func Required() bool {
	return truthy(os.Getenv("CI")) || truthy(os.Getenv(EnvRequire))
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Kafka returns the seed brokers from WMRL_TEST_KAFKA after checking, once
// per process, that they answer a metadata request. Unset skips the test
// unless Required; unreachable always fails it, because an address that was
// set but does not answer is a broken setup, not an opt-out.
func Kafka(t testing.TB) []string {
	t.Helper()
	raw := strings.TrimSpace(os.Getenv(EnvKafka))
	if raw == "" {
		unavailable(t, EnvKafka+" is not set")
		return nil
	}
	seeds := splitSeeds(raw)
	if err := kafkaReach.check(raw, func(ctx context.Context) error { return pingKafka(ctx, seeds) }); err != nil {
		t.Fatalf("testenv: Kafka at %s=%s is unreachable: %v (%s)", EnvKafka, raw, err, howToRun)
	}
	return seeds
}

// Redis returns the Redis URL from WMRL_TEST_REDIS after checking, once per
// process, that it answers PING. Unset and unreachable behave as in Kafka.
func Redis(t testing.TB) string {
	t.Helper()
	url := strings.TrimSpace(os.Getenv(EnvRedis))
	if url == "" {
		unavailable(t, EnvRedis+" is not set")
		return ""
	}
	if err := redisReach.check(url, func(ctx context.Context) error { return pingRedis(ctx, url) }); err != nil {
		t.Fatalf("testenv: Redis at %s=%s is unreachable: %v (%s)", EnvRedis, url, err, howToRun)
	}
	return url
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("testenv: %s but services are required (CI=true or %s=1): %s", why, EnvRequire, howToRun)
		return
	}
	t.Skipf("testenv: %s; integration test skipped (%s)", why, howToRun)
}

func splitSeeds(raw string) []string {
	var seeds []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// reachability remembers one check result per address so a package with
// many integration tests pays for the round trip once.
type reachability struct {
	mu     sync.Mutex
	checks map[string]*reachCheck
}

type reachCheck struct {
	once sync.Once
	err  error
}

var kafkaReach, redisReach reachability

func (r *reachability) check(key string, probe func(context.Context) error) error {
	r.mu.Lock()
	if r.checks == nil {
		r.checks = make(map[string]*reachCheck)
	}
	c, ok := r.checks[key]
	if !ok {
		c = &reachCheck{}
		r.checks[key] = c
	}
	r.mu.Unlock()
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
		defer cancel()
		c.err = probe(ctx)
	})
	return c.err
}

func pingKafka(ctx context.Context, seeds []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return kafkaprobe.ErrNoBrokers
	}
	return nil
}

func pingRedis(ctx context.Context, url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	cl := redis.NewClient(opts)
	defer cl.Close()
	if err := cl.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// maxNameLen keeps generated names well below Kafka's 249-character topic
// limit, leaving room for callers to append a suffix.
const maxNameLen = 180

// Name returns a name unique to this test and process, made only of
// characters that are legal in Kafka topic names, transactional IDs, group
// IDs and Redis keys: "wmrl.test.<sanitized test name>.<random hex>".
func Name(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	return nameFor(t.Name(), hex.EncodeToString(b))
}

func nameFor(testName, suffix string) string {
	var sb strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			sb.WriteRune(r)
		default:
			// '.' is legal in topics but would blur the name's own separators,
			// and '_' collides with '.' in Kafka metric names.
			sb.WriteByte('-')
		}
	}
	base := sb.String()
	if budget := maxNameLen - len("wmrl.test..") - len(suffix); len(base) > budget {
		base = base[:budget]
	}
	return "wmrl.test." + base + "." + suffix
}

// Topic creates a topic with a unique name (see Name) and the given
// partition count on brokers, waits until its metadata lists a leader for
// every partition, and deletes it when the test ends.
func Topic(t testing.TB, brokers []string, partitions int32) string {
	t.Helper()
	topic := Name(t)
	createTopics(t, brokers, partitions, topic)
	return topic
}

// Topics creates every wmrl topic under a prefix of the test's own (see Name)
// as Topic creates one, and returns their names.
func Topics(t testing.TB, brokers []string, partitions int32) topics.Names {
	t.Helper()
	names := topics.NewNames(Name(t) + ".")
	createTopics(t, brokers, partitions, names.All()...)
	return names
}

func createTopics(t testing.TB, brokers []string, partitions int32, names ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, names...)
	t.Cleanup(func() { deleteTopic(t, brokers, names...) })
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("testenv: create topics %v: %v", names, err)
	}
	for _, topic := range names {
		if err := waitLeaders(ctx, adm, topic, partitions); err != nil {
			t.Fatalf("testenv: topic %s: %v", topic, err)
		}
	}
}

var errNoLeader = errors.New("partition has no leader yet")

func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	for {
		err := leadersKnown(ctx, adm, topic, partitions)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for leaders: %w", errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func leadersKnown(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		return fmt.Errorf("topic not in metadata: %w", errNoLeader)
	}
	if td.Err != nil {
		return fmt.Errorf("topic metadata: %w", td.Err)
	}
	if int32(len(td.Partitions)) != partitions {
		return fmt.Errorf("%d of %d partitions listed: %w", len(td.Partitions), partitions, errNoLeader)
	}
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return fmt.Errorf("partition %d: %w", p.Partition, errors.Join(errNoLeader, p.Err))
		}
	}
	return nil
}

func deleteTopic(t testing.TB, brokers []string, names ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Logf("testenv: cleanup: kafka client: %v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, names...); err != nil {
		t.Logf("testenv: cleanup: delete topics %v: %v", names, err)
	}
}
