package correct

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// formatWorkload is the workload both format tests run.
var formatWorkload = SynthConfig{Runs: 2, Steps: 4, Groups: 4, GroupSize: 8, AnchorEvery: 2, Streams: 2, FailEvery: 9, Seed: 38, RunPrefix: "fmt"}

// digestInFormat writes formatWorkload in format f onto names' topics at seeds, runs `wmrl
// correct` over it and returns the digest of the advantage rows it wrote, after checking it
// against the reference computed without the stage. With a registry url (an in-process double or
// a real registry) the records are Confluent-framed, the stage checks their ids, and one
// predicted record framed with an id the registry does not know is put in the middle of the
// input: it must be dead-lettered as schema-unknown while the run goes on to the same digest. The
// stage is restarted after step 1 (its state rebuilt from the changelog).
func digestInFormat(t *testing.T, f topics.Format, registry string, seeds []string, rdb redis.UniversalClient, names topics.Names) string {
	t.Helper()
	names.Format = f
	if registry != "" {
		reg, err := schemareg.New(schemareg.Config{URLs: []string{registry}})
		if err != nil {
			t.Fatal(err)
		}
		ss, err := schemareg.Schemas(names)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Register(context.Background(), ss...); err != nil {
			t.Fatal(err)
		}
		names.Registry = reg
	}
	steps, err := Synthesize(names, formatWorkload)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, s := range steps {
		recs = append(recs, s.Records()...)
	}
	// The input really is in format f: JSON records start with '{', Protobuf ones never do;
	// framed ones start with the magic byte 0.
	ct, _ := topics.HeaderValue(recs[0].Headers, topics.HeaderContentType)
	if isJSON := bytes.HasPrefix(recs[0].Value, []byte("{")); isJSON != (f == topics.FormatJSON) || topics.RecordFormat(recs[0]) != f {
		t.Fatalf("%s: input record %q (content-type %s) is not in that format", f, recs[0].Value, ct)
	}
	// Two phases with a stage restart between them: steps 0-1, then the rest. The second stage
	// rebuilds its state from the changelog the first wrote (framed Protobuf in the registry
	// mode), so the digest also proves the restore.
	var first, second []*kgo.Record
	for _, s := range steps {
		if s.Step < 2 {
			first = append(first, s.Records()...)
		} else {
			second = append(second, s.Records()...)
		}
	}
	if registry != "" {
		var garbage *kgo.Record
		for _, r := range second {
			if r.Topic == names.Predicted() {
				c := *r
				c.Value = append([]byte{0, 0x7f, 0xff, 0xff, 0x00}, r.Value[5:]...)
				garbage = &c
				break
			}
		}
		second = append([]*kgo.Record{garbage}, second...)
	}
	testenv.Produce(t, seeds, first)
	cc := smallCorrection()
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.RedisPrefix = names.Prefix + "state"
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	phase1 := 2 * formatWorkload.Runs * formatWorkload.Groups * formatWorkload.GroupSize
	rd.readUntil(t, phase1, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(rd.rows) != phase1 {
		t.Fatalf("%s: phase 1: %d rows, want %d", f, len(rd.rows), phase1)
	}
	testenv.Produce(t, seeds, second)
	cfg.Registry = nil
	stop = startConsumer(t, cfg)
	rd.readUntil(t, rollouts(formatWorkload), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, rd.rows, rollouts(formatWorkload))
	checkSideTopics(t, seeds, names, registry != "")
	if registry != "" {
		var reasons []string
		for _, d := range readDeadLetters(t, seeds, names.DLQ(), 1, 15*time.Second) {
			reasons = append(reasons, d.Reason)
		}
		if !slices.Equal(reasons, []string{"schema-unknown"}) {
			t.Fatalf("dead letters %v, want the garbage id's schema-unknown alone", reasons)
		}
	}
	got := topics.DigestRows(rd.rows)
	if want := topics.DigestRows(referenceRows(t, cc, retopic(recs, names))); got != want {
		t.Fatalf("%s: live digest %s, reference %s", f, got, want)
	}
	return got
}

// checkSideTopics reads the advantages and calibration topics the stage wrote: with a registry
// (framed) every record is Confluent-framed Protobuf and says so in its content-type, else bare
// Arrow and the binary layouts as always; every record decodes through names' content-type switch
// (ids checked against the registry), and the changelog rebuilds every (run, stream) state.
func checkSideTopics(t *testing.T, seeds []string, names topics.Names, framed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	start := map[string]map[int32]kgo.Offset{}
	var parts []int32
	for _, topic := range []string{names.Advantages(), names.Calibration()} {
		n, err := topicread.PartitionCount(ctx, opts, topic)
		if err != nil {
			t.Fatal(err)
		}
		start[topic] = map[int32]kgo.Offset{}
		for p := range int32(n) {
			start[topic][p] = kgo.NewOffset().AtStart()
			if topic == names.Calibration() {
				parts = append(parts, p)
			}
		}
	}
	kinds, size := map[string]int{}, map[string]int{}
	err := topicread.ToEnd(ctx, opts, start, 0, nil, func(r *kgo.Record) error {
		if r.Value == nil {
			return nil
		}
		ct, _ := topics.HeaderValue(r.Headers, topics.HeaderContentType)
		var kind, want string
		var err error
		switch {
		case r.Topic == names.Advantages():
			kind, want = "advantages", topics.ContentTypeArrow
			_, err = names.DecodeAdvantageRecord(ctx, r)
		case topics.IsCalibrationEnd(r):
			kind, want = "end", topics.ContentTypeBinary
			_, err = names.DecodeCalibrationEndRecord(ctx, r)
		case topics.IsCalibrationChunk(r):
			kind, want = "chunk", topics.ContentTypeBinary
			_, err = names.DecodeCalibrationChunkRecord(ctx, r, correction.ChunkPairs)
		default:
			kind, want = "snapshot", topics.ContentTypeBinary
			_, err = names.DecodeCalibrationRecord(ctx, r)
		}
		if framed {
			want = topics.ContentTypeProtobufConfluent
			if r.Value[0] != 0 {
				t.Errorf("%s record %s/%d@%d is not framed", kind, r.Topic, r.Partition, r.Offset)
			}
		}
		if ct != want {
			t.Errorf("%s record %s/%d@%d: content-type %q, want %q", kind, r.Topic, r.Partition, r.Offset, ct, want)
		}
		if err != nil {
			t.Errorf("%s record %s/%d@%d: %v", kind, r.Topic, r.Partition, r.Offset, err)
		}
		kinds[kind]++
		size[kind] += len(r.Value)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if kinds["advantages"] == 0 || kinds["snapshot"] == 0 || kinds["chunk"] == 0 {
		t.Fatalf("records read by kind: %v", kinds)
	}
	t.Logf("framed %v: records by kind %v, value bytes %v", framed, kinds, size)
	states, err := RebuildFromChangelog(ctx, opts, names, parts, 20*time.Second, quietLogger())
	if want := formatWorkload.Runs * formatWorkload.Streams; err != nil || len(states) != want {
		t.Fatalf("rebuilt %d states from the changelog (%v), want %d", len(states), err, want)
	}
}

// TestFormatsGiveTheSameDigest runs one workload through `wmrl correct` (embedded kfake), its
// input written as JSON, as Protobuf and as Protobuf framed against a registry (srfake), and
// compares the advantage digests: the digest is computed over decoded rows (topics.Digest), never
// wire bytes, so the format must not change it. The analytics tap then turns each mode's
// advantages and calibration topics into Parquet, and the files must hold the same tables.
func TestFormatsGiveTheSameDigest(t *testing.T) {
	fake := schemareg.NewDouble()
	t.Cleanup(fake.Close)
	digests, parquet := map[string]string{}, map[string]tapOutput{}
	for _, m := range formatModes(fake.URL()) {
		names := topics.NewNames("fmt-" + m.name + ".")
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		seeds := fakeCluster(t, names)
		digests[m.name] = digestInFormat(t, m.f, m.registry, seeds, rdb, names)
		parquet[m.name] = tapParquet(t, seeds, names)
	}
	sameDigests(t, digests)
	// The analytics tap's Parquet files of the same input are the same in every format (issue 38
	// item 4): compared as Arrow tables, see sameParquet.
	parquetByMode(t, parquet)
}

// TestFormatsGiveTheSameDigestOnBroker is TestFormatsGiveTheSameDigest on the real broker and
// Redis (WMRL_TEST_KAFKA, WMRL_TEST_REDIS), framed against the real registry of
// WMRL_TEST_REGISTRY (that mode alone skips without one, unless services are required), the
// Parquet comparison included.
func TestFormatsGiveTheSameDigestOnBroker(t *testing.T) {
	digests, parquet := map[string]string{}, map[string]tapOutput{}
	for _, m := range formatModes("") {
		t.Run(m.name, func(t *testing.T) {
			if m.name == "registry" {
				m.registry = testenv.Registry(t)
			}
			seeds, rdb, names := onBroker(t)
			digests[m.name] = digestInFormat(t, m.f, m.registry, seeds, rdb, names)
			parquet[m.name] = tapParquet(t, seeds, names)
		})
	}
	if len(digests) == 0 {
		t.Skip("no broker: every mode skipped")
	}
	sameDigests(t, digests)
	parquetByMode(t, parquet)
}

type formatMode struct {
	name     string
	f        topics.Format
	registry string
}

// formatModes are JSON, bare Protobuf and Protobuf Confluent-framed against registry.
func formatModes(registry string) []formatMode {
	return []formatMode{{"json", topics.FormatJSON, ""}, {"protobuf", topics.FormatProtobuf, ""}, {"registry", topics.FormatProtobuf, registry}}
}

// sameDigests wants json and protobuf, and registry if it ran, all equal.
func sameDigests(t *testing.T, digests map[string]string) {
	t.Helper()
	reg, ran := digests["registry"]
	if len(digests) < 2 || digests["json"] == "" || digests["json"] != digests["protobuf"] || ran && reg != digests["json"] {
		t.Fatalf("digests by format: %v", digests)
	}
}
