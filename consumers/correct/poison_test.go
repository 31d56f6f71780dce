package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// metricSum sums the samples of the named metric whose labels include every pair in match.
func metricSum(t *testing.T, reg prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// readDeadLetters reads the DLQ with read_committed until want dead letters arrived (and a
// moment longer, so that a duplicate would show), or the timeout passes.
func readDeadLetters(t *testing.T, seeds []string, topic string, want int, timeout time.Duration) []topics.DeadLetter {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []topics.DeadLetter
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			d, err := topics.ParseDeadLetter(r)
			if err != nil {
				t.Fatalf("dead letter at %d: %v", r.Offset, err)
			}
			out = append(out, d)
		})
		if len(out) >= want {
			deadline = minTime(deadline, time.Now().Add(time.Second))
		}
	}
	return out
}

// A 10 MB predicted record (compressed under the broker's 1 MiB limit) in the middle of a run:
// it is dead-lettered without its value, or, when the DLQ topic refuses even the bounded dead
// letter, skipped with an error metric after at most one aborted transaction; every good
// rollout gets exactly one row with the digest of a clean run, and a small bad record next to
// it is dead-lettered exactly once.
func TestPoisonRecordDoesNotStall(t *testing.T) {
	cases := []struct {
		name   string
		poison []byte
		// dlqMaxMessageBytes, when set, lowers the DLQ topic's max.message.bytes below the
		// dead letter of the poison record, so Kafka refuses it.
		dlqMaxMessageBytes int
		wantDeadLetters    []string // reasons, in DLQ order
		wantUndeliverable  float64
		maxAborts          float64
	}{
		// Over the record limit, under the batch limit (--max-batch-bytes): read and judged.
		{name: "dead-lettered without its value", poison: testenv.PoisonJSON(`"schema":"wmrl.reward.predicted.v1","run_id":"r-0"`, DefaultMaxBatchBytes/2),
			wantDeadLetters: []string{"too-large", "malformed-json"}},
		// Over the batch limit too: its batch is skipped unread and dead-lettered by reference.
		{name: "batch dead-lettered by reference", poison: testenv.PoisonJSON(`"schema":"wmrl.reward.predicted.v1","run_id":"r-0"`, DefaultMaxBatchBytes+1<<20),
			wantDeadLetters: []string{topics.ReasonBatchTooLarge, "malformed-json"}},
		// 200 KB that do not compress, under the dead letter's value bound: the dead letter
		// carries them and a DLQ topic limited to 16 KiB refuses it; sent again without them.
		{name: "dead letter refused then minimal", poison: incompressible(200 << 10), dlqMaxMessageBytes: 16 << 10,
			wantDeadLetters: []string{"malformed-json", "malformed-json"}, maxAborts: 1},
		// A DLQ topic that refuses every dead letter: both bad records are skipped, two aborts each.
		{name: "dead letters refused then skipped", poison: incompressible(200 << 10), dlqMaxMessageBytes: 200,
			wantUndeliverable: 2, maxAborts: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seeds, rdb, names := onBroker(t)
			if tc.dlqMaxMessageBytes > 0 {
				alterTopic(t, seeds, names.DLQ(), "max.message.bytes", strconv.Itoa(tc.dlqMaxMessageBytes))
			}
			wl := SynthConfig{Runs: 2, Steps: 6, Groups: 4, GroupSize: 4, AnchorEvery: 2, Streams: 2, FailEvery: 11, Seed: 5, RunPrefix: "r"}
			recs := flatten(synthOn(t, names, wl))
			rand.New(rand.NewPCG(3, 4)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
			cc := smallCorrection()
			want := topics.DigestRows(referenceRows(t, cc, retopic(recs, names)))
			total := rollouts(wl)

			poison := tc.poison
			half := len(recs) / 2
			testenv.Produce(t, seeds, recs[:half])
			testenv.ProduceCompressed(t, seeds,
				&kgo.Record{Topic: names.Predicted(), Key: []byte("r-0"), Value: poison},
				&kgo.Record{Topic: names.Predicted(), Key: []byte("r-0"), Value: []byte(`{"schema":"wmrl.reward.predicted.v1",`)})
			testenv.Produce(t, seeds, recs[half:])

			cfg := testConsumerConfig(seeds, names, rdb, cc)
			cfg.Registry = prometheus.NewRegistry()
			stop := startConsumer(t, cfg)
			rd := newAdvantageReader(t, seeds, names.Advantages(), true)
			rd.readUntil(t, total, 60*time.Second)
			rd.readUntil(t, total+1, 1500*time.Millisecond)
			dls := readDeadLetters(t, seeds, names.DLQ(), len(tc.wantDeadLetters), 20*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			checkLive(t, rd.rows, total, want) // the clean run's digest
			var reasons []string
			for _, d := range dls {
				reasons = append(reasons, d.Reason)
				if d.Reason == "malformed-json" && len(d.Value) < 100 {
					continue // the small malformed record
				}
				if d.Reason == topics.ReasonBatchTooLarge {
					if d.Value != nil || d.Key != nil || d.SourceTopic != names.Predicted() || d.SourceEndOffset <= d.SourceOffset {
						t.Errorf("batch dead letter: %d value bytes, key %q, source %s [%d, %d)", len(d.Value), d.Key, d.SourceTopic, d.SourceOffset, d.SourceEndOffset)
					}
					continue
				}
				sum := sha256.Sum256(poison)
				if d.Value != nil || len(d.Omitted) != 1 || d.Omitted[0].Part != topics.OmittedValue ||
					d.Omitted[0].Bytes != len(poison) || d.Omitted[0].SHA256 != hex.EncodeToString(sum[:]) ||
					d.SourceTopic != names.Predicted() || string(d.Key) != "r-0" {
					t.Errorf("poison dead letter: %d value bytes, omitted %+v, source %s", len(d.Value), d.Omitted, d.SourceTopic)
				}
			}
			// A batch's dead letter has no key, so it may sit on another DLQ partition: compare
			// the reasons in any order.
			if slices.Sort(reasons); strings.Join(reasons, ",") != strings.Join(slices.Sorted(slices.Values(tc.wantDeadLetters)), ",") {
				t.Errorf("dead letters %v, want %v", reasons, tc.wantDeadLetters)
			}
			aborted := metricSum(t, cfg.Registry, "wmrl_correct_transactions_total", map[string]string{"result": "aborted"})
			undeliverable := metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_undeliverable_total", nil)
			t.Logf("aborted transactions %v, undeliverable dead letters %v, dead letters %v", aborted, undeliverable, reasons)
			if aborted > tc.maxAborts || undeliverable != tc.wantUndeliverable {
				t.Errorf("aborted %v, undeliverable %v; want at most %v aborts and %v undeliverable", aborted, undeliverable, tc.maxAborts, tc.wantUndeliverable)
			}
		})
	}
}

// incompressible returns n bytes of random letters (they compress by only about a quarter).
func incompressible(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 8))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return b
}

func mustRedisOpts(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// alterTopic sets one config of a topic on the real broker.
func alterTopic(t *testing.T, seeds []string, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("alter %s %s=%s: %v", topic, key, value, err)
	}
}
