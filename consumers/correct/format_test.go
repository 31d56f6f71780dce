package correct

import (
	"bytes"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// formatWorkload is the workload both format tests run.
var formatWorkload = SynthConfig{Runs: 2, Steps: 4, Groups: 4, GroupSize: 8, AnchorEvery: 2, Streams: 2, FailEvery: 9, Seed: 38, RunPrefix: "fmt"}

// digestInFormat writes formatWorkload in format f onto names' topics at seeds, runs `wmrl
// correct` over it and returns the digest of the advantage rows it wrote, after checking it
// against the reference computed without the stage.
func digestInFormat(t *testing.T, f topics.Format, seeds []string, rdb redis.UniversalClient, names topics.Names) string {
	t.Helper()
	names.Format = f
	steps, err := Synthesize(names, formatWorkload)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, s := range steps {
		recs = append(recs, s.Records()...)
	}
	// The input really is in format f: JSON records start with '{', Protobuf ones never do.
	ct, _ := topics.HeaderValue(recs[0].Headers, topics.HeaderContentType)
	if isJSON := bytes.HasPrefix(recs[0].Value, []byte("{")); isJSON != (f == topics.FormatJSON) || topics.RecordFormat(recs[0]) != f {
		t.Fatalf("%s: input record %q (content-type %s) is not in that format", f, recs[0].Value, ct)
	}
	testenv.Produce(t, seeds, recs)
	cc := smallCorrection()
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.RedisPrefix = names.Prefix + "state"
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, rollouts(formatWorkload), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, rd.rows, rollouts(formatWorkload))
	got := topics.DigestRows(rd.rows)
	if want := topics.DigestRows(referenceRows(t, cc, retopic(recs, names))); got != want {
		t.Fatalf("%s: live digest %s, reference %s", f, got, want)
	}
	return got
}

// TestFormatsGiveTheSameDigest runs one workload through `wmrl correct` twice (embedded kfake),
// its input written once as JSON and once as Protobuf, and compares the advantage digests: the
// digest is computed over decoded rows (topics.Digest), never wire bytes, so the format must not
// change it.
func TestFormatsGiveTheSameDigest(t *testing.T) {
	digests := map[topics.Format]string{}
	for _, f := range topics.Formats {
		names := topics.NewNames("fmt-" + f.String() + ".")
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		digests[f] = digestInFormat(t, f, fakeCluster(t, names), rdb, names)
	}
	if digests[topics.FormatJSON] != digests[topics.FormatProtobuf] {
		t.Fatalf("digests differ by format: %v", digests)
	}
}

// TestFormatsGiveTheSameDigestOnBroker is TestFormatsGiveTheSameDigest on the real broker and
// Redis (WMRL_TEST_KAFKA, WMRL_TEST_REDIS).
func TestFormatsGiveTheSameDigestOnBroker(t *testing.T) {
	digests := map[topics.Format]string{}
	for _, f := range topics.Formats {
		t.Run(f.String(), func(t *testing.T) {
			seeds, rdb, names := onBroker(t)
			digests[f] = digestInFormat(t, f, seeds, rdb, names)
		})
	}
	if len(digests) != len(topics.Formats) || digests[topics.FormatJSON] != digests[topics.FormatProtobuf] {
		t.Fatalf("digests by format: %v", digests)
	}
}
