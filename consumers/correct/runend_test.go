package correct

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

func endRecord(t *testing.T, run string, last int64) *kgo.Record {
	t.Helper()
	r, err := testNames.StepRecord(topics.EndOfRunMarker(run, last, time.Unix(1_700_000_000, 0).UTC()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// interleave merges the per-topic sequences of recs in a random order that keeps each topic's
// order, as a consumer polling three topics may see them (seed 0: recs as they are).
func interleave(recs []*kgo.Record, seed uint64) []*kgo.Record {
	if seed == 0 {
		return recs
	}
	byTopic := map[string][]*kgo.Record{}
	var order []string
	for _, r := range recs {
		if _, ok := byTopic[r.Topic]; !ok {
			order = append(order, r.Topic)
		}
		byTopic[r.Topic] = append(byTopic[r.Topic], r)
	}
	rng := rand.New(rand.NewPCG(seed, 29))
	out := make([]*kgo.Record, 0, len(recs))
	for len(out) < len(recs) {
		tpc := order[rng.IntN(len(order))]
		if q := byTopic[tpc]; len(q) > 0 {
			out = append(out, q[0])
			byTopic[tpc] = q[1:]
		}
	}
	return out
}

// A run ends with its end-of-run record: whatever the interleaving of the input topics and
// however often the engine seals, the rows are those of the steps up to the last one, the records
// beyond it are dead-lettered with reason run_ended, re-reads of sealed steps are dropped as
// duplicates, both runs leave memory, nothing holds the commit back, and a replay of the ended
// run alone (as Replay reads it) gives the live digest.
func TestEngineRunEnds(t *testing.T) {
	wl := SynthConfig{Runs: 2, Steps: 6, Groups: 3, GroupSize: 3, AnchorEvery: 2, Streams: 2, FailEvery: 7, Seed: 11}
	steps := synth(t, wl)
	const endedRun, last = "run-0", int64(3)
	var input, kept, late []*kgo.Record
	for _, s := range steps {
		input = append(input, s.Records()...)
		switch {
		case s.Run == endedRun && s.Step > last:
			late = append(late, s.Records()...)
		default:
			kept = append(kept, s.Records()...)
		}
		if s.Run == endedRun && s.Step == last {
			input = append(input, endRecord(t, endedRun, last))
		}
	}
	input = append(input, endRecord(t, "run-1", int64(wl.Steps-1)))
	// A trainer restarting from a checkpoint re-sends a step the run sealed: a duplicate.
	input = append(input, steps[2].Rewards[0])
	cfg := correction.DefaultConfig()
	cfg.MinPairs = 4
	want := rowsOfRun(referenceRows(t, cfg, kept), endedRun)
	if wantRows := int(last+1) * wl.Groups * wl.GroupSize; len(want) != wantRows {
		t.Fatalf("reference: %d rows of the ended run, want %d", len(want), wantRows)
	}

	for _, tc := range []struct {
		name      string
		seed      uint64
		sealEvery int
	}{
		{"generation order, seal per record", 0, 1},
		{"interleaved, seal every 7", 1, 7},
		{"interleaved, seal at the end", 2, 1 << 30},
		{"interleaved, seal every 3", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeeder(testEngine(t, cfg))
			var got []*sealed
			for i, r := range interleave(input, tc.seed) {
				f.add(r)
				if i%tc.sealEvery == 0 {
					got = append(got, f.seal(t)...)
				}
			}
			got = append(got, f.seal(t)...)
			live := rowsOfRun(rowsOf(got), endedRun)
			if d, w := topics.DigestRows(live), topics.DigestRows(want); d != w {
				t.Fatalf("ended run: digest %s over %d rows, want %s over %d", d, len(live), w, len(want))
			}
			if n := f.e.activeRuns(); n != 0 {
				t.Fatalf("%d runs still in memory after both ended", n)
			}
			if !slices.Equal(slices.Sorted(slices.Values(f.e.takeRetired())), []string{"run-0", "run-1"}) {
				t.Fatalf("retired runs: %v", f.e.ended)
			}
			if h := f.e.holdback(); len(h) != 0 {
				t.Fatalf("holdback %v after every run ended: the commit cannot pass the inputs", h)
			}
			reasons := reasonsOf(drainDeadLetters(t, f.e))
			if reasons[reasonRunEnded] != len(late) || len(reasons) != 1 {
				t.Fatalf("dead letters %v, want %d run_ended", reasons, len(late))
			}

			// Replay: the ended run's records alone, in each topic's order, on a fresh engine.
			var own []*kgo.Record
			for _, r := range input {
				if string(r.Key) == endedRun {
					own = append(own, r)
				}
			}
			rf := newFeeder(testEngine(t, cfg))
			rf.add(own...)
			replayed := rowsOf(rf.seal(t))
			if d, w := topics.DigestRows(replayed), topics.DigestRows(live); d != w {
				t.Fatalf("replay digest %s, live %s", d, w)
			}
		})
	}
}

func rowsOfRun(rows []topics.AdvantageRow, run string) []topics.AdvantageRow {
	var out []topics.AdvantageRow
	for _, r := range rows {
		if r.RunID == run {
			out = append(out, r)
		}
	}
	return out
}

// End-of-run records that contradict the run are conflicts and end nothing.
func TestEngineRunEndConflicts(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 1, Seed: 5})
	idleEnd := func(run string, last int64) *kgo.Record {
		r := endRecord(t, run, last)
		r.Headers = append(r.Headers, topics.Header(topics.HeaderEndReason, topics.EndReasonIdle))
		return r
	}
	for _, tc := range []struct {
		name    string
		records func() []*kgo.Record
		reasons map[string]int
		active  int
		// strict judges the records by their batch attributes, as the consumer does: hand-built
		// ones are not transactional, so not written by correct.
		strict bool
		// verdicts are the end-of-run records' verdicts in order (verdict.go): what correct logs
		// and records in Redis for `wmrl runs end`.
		verdicts string
	}{
		{"marker not written by correct", func() []*kgo.Record {
			return append(flatten(steps[:2]), endRecord(t, "run-0", 1), steps[2].Manifest)
		}, map[string]int{reasonEndUnauthorized: 1}, 1, true, "refused:end_unauthorized"},
		{"forged idle marker", func() []*kgo.Record {
			return append(flatten(steps[:2]), steps[3].Manifest, idleEnd("run-0", 1))
		}, map[string]int{reasonEndUnauthorized: 1}, 1, true, "refused:end_unauthorized"},
		{"last step 2^62", func() []*kgo.Record {
			return append(flatten(steps[:2]), endRecord(t, "run-0", 1<<62))
		}, map[string]int{"conflict": 1}, 1, false, "refused:conflict"},
		{"last step beyond the pending-steps window", func() []*kgo.Record {
			return append(flatten(steps[:2]), endRecord(t, "run-0", 1+DefaultPendingStepsPerRun+1))
		}, map[string]int{"conflict": 1}, 1, false, "refused:conflict"},
		{"last step at the edge of the window", func() []*kgo.Record {
			return append(flatten(steps[:2]), endRecord(t, "run-0", 1+DefaultPendingStepsPerRun))
		}, map[string]int{}, 1, false, "accepted"},
		{"last step already passed", func() []*kgo.Record {
			return append(flatten(steps[:3]), endRecord(t, "run-0", 1))
		}, map[string]int{"conflict": 1}, 1, false, "refused:conflict"},
		// The end wins: the manifest published between request and relay is run_ended.
		{"a later manifest came first", func() []*kgo.Record {
			return append(append(flatten(steps[:2]), steps[3].Manifest), endRecord(t, "run-0", 1))
		}, map[string]int{reasonRunEnded: 1}, 0, false, "accepted"},
		{"second marker with another step", func() []*kgo.Record {
			return append(flatten(steps[:1]), endRecord(t, "run-0", 2), endRecord(t, "run-0", 3))
		}, map[string]int{"conflict": 1}, 1, false, "accepted refused:conflict"},
		{"same marker twice", func() []*kgo.Record {
			return append(flatten(steps[:2]), endRecord(t, "run-0", 1), endRecord(t, "run-0", 1))
		}, map[string]int{}, 0, false, "accepted accepted"},
		{"marker before its last step is complete, rewards beyond it", func() []*kgo.Record {
			recs := append([]*kgo.Record{steps[0].Manifest}, steps[1].Rewards...)
			return append(append(recs, endRecord(t, "run-0", 0)), steps[0].Rewards...)
		}, map[string]int{reasonRunEnded: len(steps[1].Rewards)}, 0, false, "accepted"},
		{"marker for a run without a manifest", func() []*kgo.Record {
			return append(slices.Clone(steps[0].Rewards), endRecord(t, "run-0", 0))
		}, map[string]int{"conflict": 1}, 1, false, "refused:conflict"},
		{"marker for an unknown run", func() []*kgo.Record {
			return []*kgo.Record{endRecord(t, "nobody", 3)}
		}, map[string]int{"conflict": 1}, 0, false, "refused:conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeeder(testEngine(t, correction.DefaultConfig()))
			if tc.strict {
				f.e.relayed = fromTransaction
			}
			for _, r := range tc.records() {
				f.add(r)
				f.seal(t)
			}
			var verdicts []string
			for _, v := range f.e.takeVerdicts() {
				if v.Accepted {
					verdicts = append(verdicts, "accepted")
				} else {
					verdicts = append(verdicts, "refused:"+v.Reason)
				}
			}
			if got := strings.Join(verdicts, " "); got != tc.verdicts {
				t.Errorf("verdicts %q, want %q", got, tc.verdicts)
			}
			if got := reasonsOf(drainDeadLetters(t, f.e)); !mapsEqual(got, tc.reasons) {
				t.Fatalf("dead letters %v, want %v", got, tc.reasons)
			}
			if n := f.e.activeRuns(); n != tc.active {
				t.Fatalf("%d active runs, want %d", n, tc.active)
			}
			// A refused marker ends nothing, so it holds no offset back.
			for id, rb := range f.e.runs {
				if rb.end != nil && tc.name != "second marker with another step" && len(tc.reasons) > 0 {
					t.Fatalf("run %s holds the refused end-of-run record of step %d", id, rb.end.last)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A retired run's per-run series are deleted; other runs' series stay.
func TestMetricsForgetRuns(t *testing.T) {
	e := testEngine(t, correction.DefaultConfig())
	for _, run := range []string{"a", "b"} {
		for _, st := range []string{"s1", "s2"} {
			e.m.observe(&topics.CalibrationSnapshot{RunID: run, Stream: st, Debias: &topics.DebiasShift{}})
		}
	}
	before := seriesCount(e.m.sealedStep)
	e.m.forgetRuns([]string{"a"})
	if after := seriesCount(e.m.sealedStep); before != 4 || after != 2 {
		t.Fatalf("sealed-step series: %d before, %d after retiring one of two runs", before, after)
	}
	if n := seriesCount(e.m.debias.shift); n != 2 {
		t.Fatalf("debias series after retiring: %d, want 2", n)
	}
}

// seriesCount counts the series a collector holds.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// The run-control topic's end requests are queued for the steps topic on the request's partition,
// value and key unchanged and the request named in a header; an idle claim, a manifest that is no
// end and a request keyed by another run are dead letters and relay nothing.
func TestEngineRelayEnd(t *testing.T) {
	req := func(t *testing.T, run string, mod func(*kgo.Record)) *kgo.Record {
		r, err := testNames.EndRequestRecord(run, 3, time.Unix(1_700_000_000, 0).UTC())
		if err != nil {
			t.Fatal(err)
		}
		r.Partition, r.Offset = 2, 17
		if mod != nil {
			mod(r)
		}
		return r
	}
	notEnd, err := testNames.StepRecord(topics.StepManifest{Schema: topics.SchemaStep, RunID: "r", Step: 3,
		Groups: []topics.GroupManifest{{GroupID: "g", Size: 1, Stream: "default"}}})
	if err != nil {
		t.Fatal(err)
	}
	notEnd.Topic = testNames.Runs()
	for _, tc := range []struct {
		name   string
		rec    *kgo.Record
		reason string // "" relays
	}{
		{"end request", req(t, "r", nil), ""},
		// Extra headers are not carried over: the relay is the canonical record.
		{"end request with headers", req(t, "r", func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x-pad", Value: make([]byte, 4096)})
		}), ""},
		{"idle claimed", req(t, "r", func(r *kgo.Record) {
			r.Headers = append(r.Headers, topics.Header(topics.HeaderEndReason, topics.EndReasonIdle))
		}), reasonEndUnauthorized},
		{"not an end", notEnd, "invalid-field:end_of_run"},
		{"keyed by another run", req(t, "r", func(r *kgo.Record) { r.Key = []byte("other") }), "invalid-field:key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, correction.DefaultConfig())
			e.add(context.Background(), tc.rec, time.Now())
			relayed := e.takeRelayed()
			got := reasonsOf(drainDeadLetters(t, e))
			if tc.reason != "" {
				if len(relayed) != 0 || !mapsEqual(got, map[string]int{tc.reason: 1}) {
					t.Fatalf("relayed %d, dead letters %v; want none relayed and one %s", len(relayed), got, tc.reason)
				}
				return
			}
			if len(got) != 0 || len(relayed) != 1 {
				t.Fatalf("relayed %d, dead letters %v; want one relayed", len(relayed), got)
			}
			r := relayed[0]
			if _, ok := topics.HeaderValue(r.Headers, "x-pad"); ok {
				t.Fatal("the relay carries the request's extra header")
			}
			src, _ := topics.HeaderValue(r.Headers, topics.HeaderEndRequest)
			if r.Topic != testNames.Steps() || r.Partition != 2 || string(r.Key) != "r" || string(r.Value) != string(tc.rec.Value) ||
				src != testNames.Runs()+"/2/17" {
				t.Fatalf("relayed %s/%d key %q request %q, want the steps topic, partition 2, key r, request %s/2/17", r.Topic, r.Partition, r.Key, src, testNames.Runs())
			}
		})
	}
}
