package correct

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// On the real broker: of three runs, two end by requests on the run-control topic, which the
// consumer relays onto the steps topic; a late manifest of an ended run follows. Every step is
// sealed exactly once with the reference digest, wmrl_correct_active_runs returns to the one live
// run, the ended runs' per-run series are gone, the late manifest is dead-lettered with reason
// run_ended, and a replay of an ended run from the input topics gives its live digest. The live
// run is not ended by an end-of-run record written straight onto the steps topic (as a principal
// that may write steps could: end_unauthorized) nor by a request naming step 2^62 (conflict), and
// the steps partition's committed offset moves past both.
func TestConsumerRunEndsOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	wl := SynthConfig{Runs: 3, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 2, Seed: 13, RunPrefix: "e"}
	recs := flatten(synthOn(t, names, wl))
	endReq := func(run string, last int64) *kgo.Record {
		r, err := names.EndRequestRecord(run, last, time.Unix(1_700_000_000, 0).UTC())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	lateManifest := manifestRecord(t, "e-0", 4, 2, 2)
	lateManifest.Topic = names.Steps()
	last := int64(wl.Steps - 1)
	testenv.Produce(t, seeds, append(recs, endReq("e-0", last), endReq("e-1", last)))
	cc := smallCorrection()
	want := referenceRows(t, cc, retopic(recs, names))
	total := rollouts(wl)

	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.Registry = prometheus.NewRegistry()
	stop := startConsumer(t, cfg)
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, total, 30*time.Second)
	dl := func(reason string) float64 {
		return metricSum(t, cfg.Registry, "wmrl_correct_dead_letters_total", map[string]string{"reason": reason})
	}
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: active runs %v, dead letters run_ended %v, end_unauthorized %v, conflict %v", what,
					metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil), dl(reasonRunEnded), dl(reasonEndUnauthorized), dl("conflict"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUntil("two runs ended", func() bool { return metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil) == 1 })
	// The late manifest after the relayed end (a requester ends its run after its last manifest).
	forged := endRecordOn(t, names, "e-2", last)
	testenv.Produce(t, seeds, []*kgo.Record{lateManifest, forged, endReq("e-2", 1<<62)})
	waitUntil("the late manifest, the forged and the implausible end refused", func() bool {
		return dl(reasonRunEnded) == 1 && dl(reasonEndUnauthorized) == 1 && dl("conflict") == 1
	})
	if n := metricSum(t, cfg.Registry, "wmrl_correct_active_runs", nil); n != 1 {
		t.Fatalf("%v active runs after the refused ends, want 1 (e-2 lives on)", n)
	}
	for run, n := range map[string]float64{"e-0": 0, "e-1": 0, "e-2": float64(wl.Streams)} {
		// masked_share is set after the commit, for the steps just sealed: a retired run's
		// series must not come back with its last step.
		for _, name := range []string{"wmrl_correct_sealed_step", "wmrl_correct_masked_share"} {
			if got := seriesOf(t, cfg.Registry, name, run); got != n {
				t.Errorf("run %s: %v %s series, want %v", run, got, name, n)
			}
		}
	}
	// Nothing pins e-2's steps partition: its committed offset passes the relayed 2^62 record.
	part := topics.PartitionFor("e-2", testPartitions)
	pinned := relayedEndOffset(t, seeds, names, part, 1<<62)
	waitUntil("the committed offset past the 2^62 end", func() bool { return committedOffset(t, seeds, cfg.Group, names.Steps(), part) > pinned })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkLive(t, rd.rows, total, topics.DigestRows(want))

	res := replayRun(t, seeds, names, "e-0", cc)
	if w := topics.DigestRows(rowsOfRun(rd.rows, "e-0")); res.Digest != w || res.DeadLetters != 1 || res.Incomplete != 0 {
		t.Fatalf("replay of the ended run: %+v; want digest %s, 1 dead letter, nothing incomplete", res, w)
	}
	res = replayRun(t, seeds, names, "e-2", cc)
	if w := topics.DigestRows(rowsOfRun(rd.rows, "e-2")); res.Digest != w || res.DeadLetters != 2 || res.Incomplete != 0 {
		t.Fatalf("replay of the live run: %+v; want digest %s, 2 dead letters (the forged and the implausible end), nothing incomplete", res, w)
	}
}

// endRecordOn is an end-of-run record of run written straight onto the steps topic, as any
// principal that may write steps can: not in a transaction, so not one correct wrote.
func endRecordOn(t *testing.T, names topics.Names, run string, last int64) *kgo.Record {
	t.Helper()
	r, err := names.StepRecord(topics.EndOfRunMarker(run, last, time.Unix(1_700_000_000, 0).UTC()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// relayedEndOffset is the offset of the end-of-run record the consumer relayed onto partition
// part of the steps topic naming step last.
func relayedEndOffset(t *testing.T, seeds []string, names topics.Names, part int32, last int64) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{names.Steps(): {part: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no relayed end-of-run record of step %d on %s/%d", last, names.Steps(), part)
		}
		var off int64 = -1
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := topics.HeaderValue(r.Headers, topics.HeaderEndRequest); !ok || !r.Attrs.IsTransactional() {
				return
			}
			if m, err := topics.DecodeStep(r.Value); err == nil && m.EndOfRun && m.Step == last {
				off = r.Offset
			}
		})
		if off >= 0 {
			return off
		}
	}
}

// committedOffset is group's committed offset of topic/part (-1: none).
func committedOffset(t *testing.T, seeds []string, group, topic string, part int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, part); ok {
		return o.At
	}
	return -1
}

// seriesOf counts the series of metric name labelled run.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name, run string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "run" && l.GetValue() == run {
					n++
				}
			}
		}
	}
	return n
}
