package stage

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// letters returns n random letters: they compress poorly, unlike testenv.PoisonJSON.
func letters(n int) string {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// On the real broker, the shared stage runtime (worldmodel and sandbox run on it) meets three
// poison records between good ones on one partition: a 10 MB compressible input its handler
// rejects (dead-lettered without its value), an input whose output Kafka refuses (dead-lettered as
// output-refused) and a 200 KB bad input whose dead letter the DLQ topic (64 KiB limit) refuses
// (sent again without its value). With a DLQ topic that refuses every dead letter, all three
// are skipped with an error metric. Either way every good record is processed once, the stage
// keeps running and commits everything.
func TestStagePoisonRecords(t *testing.T) {
	cases := []struct {
		name        string
		dlqMax      string
		wantReasons string // sorted
		wantSkipped float64
	}{
		{name: "dead-lettered", dlqMax: "65536", wantReasons: "invalid-field:value,invalid-field:value,output-refused"},
		{name: "dead letters refused", dlqMax: "200", wantSkipped: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testStagePoison(t, tc.dlqMax, tc.wantReasons, tc.wantSkipped) })
	}
}

func testStagePoison(t *testing.T, dlqMax, wantReasons string, wantSkipped float64) {
	brokers := testenv.Kafka(t)
	prefix := testenv.Name(t) + "."
	names := topics.NewNames(prefix)
	in, out := prefix+"in", prefix+"out"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, in, out); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopics(ctx, 1, 1, map[string]*string{"max.message.bytes": &dlqMax}, names.DLQ()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		_, _ = adm.DeleteTopics(dctx, in, out, names.DLQ())
	})

	poison := testenv.PoisonJSON(`"schema":"wmrl.rollout.v1"`, testenv.PoisonBytes)
	inputs := []string{"1", string(poison), "2", "echo:" + strings.Repeat("y", 2<<20), "3", "bad:" + letters(200<<10), "4"}
	var recs []*kgo.Record
	for _, v := range inputs {
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte(v)})
	}
	testenv.ProduceCompressed(t, brokers, recs...)

	h := func(_ context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		if rest, ok := strings.CutPrefix(string(r.Value), "echo:"); ok {
			return []*kgo.Record{{Topic: out, Key: r.Key, Value: []byte(rest)}}, nil
		}
		x, err := strconv.Atoi(string(r.Value))
		if err != nil {
			return nil, &topics.FieldError{Record: "test", Field: "value", Value: "…", Reason: "not an integer", Err: topics.ErrInvalid}
		}
		return []*kgo.Record{{Topic: out, Key: r.Key, Value: []byte(strconv.Itoa(2 * x))}}, nil
	}
	reg := prometheus.NewRegistry()
	group := prefix + "poison"
	st, err := New(Config{Name: "poison", Group: group, Topics: []string{in}, Names: names, Registry: reg,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Concurrency: 2, CommitInterval: 50 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runStage(ctx, st)

	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out, names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var outputs, reasons []string
	var omitted [][]topics.OmittedPart
	wantDead := len(strings.Split(wantReasons, ","))
	if wantReasons == "" {
		wantDead = 0
	}
	for len(outputs) < 4 || len(reasons) < wantDead {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("outputs %v, dead letters %v: the stage stalled", outputs, reasons)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == out {
				outputs = append(outputs, string(r.Value))
				return
			}
			d, err := topics.ParseDeadLetter(r)
			if err != nil {
				t.Fatal(err)
			}
			reasons, omitted = append(reasons, d.Reason), append(omitted, d.Omitted)
		})
	}
	// Give a refused or duplicated record the time to show.
	time.Sleep(time.Second)
	slices.Sort(outputs)
	slices.Sort(reasons)
	if got := strings.Join(outputs, ","); got != "2,4,6,8" {
		t.Errorf("outputs %s, want 2,4,6,8", got)
	}
	if got := strings.Join(reasons, ","); got != wantReasons {
		t.Errorf("dead letters %s, want %s", got, wantReasons)
	}
	for i, o := range omitted {
		if len(o) != 1 || o[0].Part != topics.OmittedValue || o[0].SHA256 == "" || o[0].Bytes < 200<<10 {
			t.Errorf("dead letter %d omitted %+v, want the value replaced by its size and SHA-256", i, o)
		}
	}
	skipped := metricValue(t, reg, "wmrl_stage_dead_letters_undeliverable_total")
	if skipped != wantSkipped {
		t.Errorf("wmrl_stage_dead_letters_undeliverable_total %v, want %v", skipped, wantSkipped)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v (a poison record must not stop the stage)", err)
	}
	if lag := groupLag(ctx, t, adm, group); lag != 0 {
		t.Errorf("lag %d after shutdown: every input, poison included, must be committed", lag)
	}
}

func metricValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}
