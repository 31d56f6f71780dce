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

// TestFormatsGiveTheSameDigest runs one workload through `wmrl correct` twice, its input written
// once as JSON and once as Protobuf, and compares the advantage digests: the digest is computed
// over decoded rows (topics.Digest), never wire bytes, so the format must not change it.
func TestFormatsGiveTheSameDigest(t *testing.T) {
	wl := SynthConfig{Runs: 2, Steps: 4, Groups: 4, GroupSize: 8, AnchorEvery: 2, Streams: 2, FailEvery: 9, Seed: 38}
	cc := smallCorrection()
	digests := map[topics.Format]string{}
	for _, f := range topics.Formats {
		names := topics.NewNames("fmt-" + f.String() + ".")
		names.Format = f
		steps, err := Synthesize(names, wl)
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
		seeds := fakeCluster(t, names)
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		testenv.Produce(t, seeds, recs)
		stop := startConsumer(t, testConsumerConfig(seeds, names, rdb, cc))
		rd := newAdvantageReader(t, seeds, names.Advantages(), true)
		rd.readUntil(t, rollouts(wl), 30*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		_ = rdb.Close()
		checkExactlyOnce(t, rd.rows, rollouts(wl))
		digests[f] = topics.DigestRows(rd.rows)
		if want := topics.DigestRows(referenceRows(t, cc, retopic(recs, names))); digests[f] != want {
			t.Fatalf("%s: live digest %s, reference %s", f, digests[f], want)
		}
	}
	if digests[topics.FormatJSON] != digests[topics.FormatProtobuf] {
		t.Fatalf("digests differ by format: %v", digests)
	}
}
