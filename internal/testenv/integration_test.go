package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	segkafka "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/testenv/kafkaprobe"
)

// txnFixture is what writeTxnFixture put into a one-partition topic: three
// transactions, the middle one aborted, the last ending in a sentinel record
// so readers know when they have seen everything.
type txnFixture struct {
	committed []string // in offset order, sentinel last
	aborted   []string
}

const sentinel = "end"

func writeTxnFixture(t *testing.T, brokers []string, topic string) txnFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(testenv.Name(t)),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer cl.Close()

	fx := txnFixture{
		committed: []string{"c0", "c1", "c2", "c3", "c4", sentinel},
		aborted:   []string{"a0", "a1"},
	}
	txns := []struct {
		values []string
		end    kgo.TransactionEndTry
	}{
		{fx.committed[:3], kgo.TryCommit},
		{fx.aborted, kgo.TryAbort},
		{fx.committed[3:], kgo.TryCommit},
	}
	for i, txn := range txns {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("txn %d: begin: %v", i, err)
		}
		recs := make([]*kgo.Record, len(txn.values))
		for j, v := range txn.values {
			recs[j] = &kgo.Record{Key: []byte("run-1"), Value: []byte(v), Partition: 0}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("txn %d: produce: %v", i, err)
		}
		if err := cl.EndTransaction(ctx, txn.end); err != nil {
			t.Fatalf("txn %d: end: %v", i, err)
		}
	}
	return fx
}

// readFranz consumes the topic from the start until the sentinel arrives.
func readFranz(t *testing.T, brokers []string, topic string, iso kgo.IsolationLevel) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	var got []string
	for !slices.Contains(got, sentinel) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("sentinel not seen within timeout; got %q", got)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		for _, r := range fs.Records() {
			got = append(got, string(r.Value))
		}
	}
	return got
}

func TestFranzReadCommittedHidesAborted(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	fx := writeTxnFixture(t, brokers, topic)

	committed := readFranz(t, brokers, topic, kgo.ReadCommitted())
	if !slices.Equal(committed, fx.committed) {
		t.Errorf("read_committed got %q, want %q", committed, fx.committed)
	}

	// The aborted records must really be in the log, or the check above
	// proves nothing about filtering.
	uncommitted := readFranz(t, brokers, topic, kgo.ReadUncommitted())
	want := slices.Concat(fx.committed[:3], fx.aborted, fx.committed[3:])
	if !slices.Equal(uncommitted, want) {
		t.Errorf("read_uncommitted got %q, want %q", uncommitted, want)
	}
}

// TestKafkaGoReadCommittedInterop reads what franz-go wrote with
// segmentio/kafka-go's Reader at ReadCommitted, as an analytics tap would.
//
// kafka-go v0.4.51 (the newest release) does not implement the client half of
// read_committed (segmentio/kafka-go#1332): the broker bounds the fetch at the
// last stable offset and lists the aborted transactions, but the client must
// drop aborted batches and control batches itself, and kafka-go delivers both.
// The test pins exactly that, so nobody builds an exactly-once tap on the
// kafka-go Reader by mistake, and an upgrade that fixes it fails here and is
// noticed (then require got == fx.committed).
func TestKafkaGoReadCommittedInterop(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	fx := writeTxnFixture(t, brokers, topic)

	r := segkafka.NewReader(segkafka.ReaderConfig{
		Brokers:        brokers,
		Topic:          topic,
		Partition:      0,
		IsolationLevel: segkafka.ReadCommitted,
		MaxWait:        500 * time.Millisecond,
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got, data []string
	for !slices.Contains(data, sentinel) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go read after %q: %v", got, err)
		}
		v := describeMessage(m)
		got = append(got, v)
		if !strings.HasPrefix(v, "<") {
			data = append(data, v)
		}
	}
	t.Logf("kafka-go ReadCommitted delivered %q", got)

	if slices.Equal(got, fx.committed) {
		t.Fatalf("kafka-go now honours ReadCommitted (delivered exactly %q): "+
			"make this test require that, and tell sinks/analytics kafka-go taps are exactly-once", got)
	}
	// Kafka's log layout: each transaction's records, then its marker.
	want := slices.Concat(fx.committed[:3], []string{"<commit marker>"},
		fx.aborted, []string{"<abort marker>"}, fx.committed[3:])
	if !slices.Equal(got, want) {
		t.Errorf("kafka-go ReadCommitted delivered %q, want the known-defective %q", got, want)
	}
	// Whatever else it does, every committed record must arrive, in order.
	var committedSeen []string
	for _, v := range data {
		if slices.Contains(fx.committed, v) {
			committedSeen = append(committedSeen, v)
		}
	}
	if !slices.Equal(committedSeen, fx.committed) {
		t.Errorf("kafka-go committed records %q, want %q in order", committedSeen, fx.committed)
	}
}

// describeMessage renders a kafka-go message as its value, or names it as a
// transaction marker: a control record has a 4-byte key (int16 version,
// int16 type: 0 abort, 1 commit) and a 6-byte value.
func describeMessage(m segkafka.Message) string {
	if len(m.Key) == 4 && len(m.Value) == 6 && m.Key[0] == 0 && m.Key[1] == 0 && m.Key[2] == 0 {
		switch m.Key[3] {
		case 0:
			return "<abort marker>"
		case 1:
			return "<commit marker>"
		}
	}
	return string(m.Value)
}

func TestRedisRoundTrip(t *testing.T) {
	url := testenv.Redis(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Hash-tagged like the correction state keys (wmrl:{run}:…), so the
	// same code works against Redis Cluster.
	run := testenv.Name(t)
	snap := fmt.Sprintf("wmrl:{%s}:snapshot:1", run)
	sealed := fmt.Sprintf("wmrl:{%s}:sealed", run)
	t.Cleanup(func() { rdb.Del(context.Background(), snap, sealed) })

	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, snap, "digest-abc", time.Minute)
		p.Incr(ctx, sealed)
		return nil
	}); err != nil {
		t.Fatalf("MULTI/EXEC: %v", err)
	}
	if got, err := rdb.Get(ctx, snap).Result(); err != nil || got != "digest-abc" {
		t.Errorf("GET %s = %q, %v; want digest-abc", snap, got, err)
	}
	if got, err := rdb.Get(ctx, sealed).Int(); err != nil || got != 1 {
		t.Errorf("GET %s = %d, %v; want 1", sealed, got, err)
	}
	if _, err := rdb.Get(ctx, fmt.Sprintf("wmrl:{%s}:missing", run)).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET of a missing key: err = %v, want redis.Nil", err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			t.Logf("Redis server version %s", v)
		}
	}
}

func TestBrokerReportsKafka4(t *testing.T) {
	brokers := testenv.Kafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := kafkaprobe.Describe(ctx, cl)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	t.Logf("broker: %s", info)
	t.Logf("broker reports Kafka %s", info.Release())
	if !strings.HasPrefix(info.Release(), "4.") {
		t.Errorf("broker release %q (guess %q), want Kafka 4.x (deploy/local/kafka.sh pins 4.4.0)", info.Release(), info.VersionGuess)
	}
}

func TestCommitTransactionalProbe(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkaprobe.CommitTransactional(ctx, brokers, topic); err != nil {
		t.Fatalf("CommitTransactional: %v", err)
	}
}
