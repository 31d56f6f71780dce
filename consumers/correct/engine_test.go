package correct

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

var testNames = topics.NewNames("t.")

func testEngine(t *testing.T, cfg correction.Config) *engine {
	t.Helper()
	corr, err := correction.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(corr, testNames, 0, replayLimits(t, Limits{}), m)
	// Hand-built records carry no batch attributes: the tests' end-of-run records stand for ones
	// correct relayed or wrote itself. TestEngineRunEndConflicts checks the real predicate.
	e.relayed = func(*kgo.Record) bool { return true }
	return e
}

// replayLimits fills l as Replay does: per-run and per-step defaults, no instance limits.
func replayLimits(t testing.TB, l Limits) Limits {
	t.Helper()
	l, err := l.withDefaults(false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func synth(t *testing.T, cfg SynthConfig) []SynthStep {
	t.Helper()
	return synthOn(t, testNames, cfg)
}

// synthOn synthesizes cfg's workload on the topics of names.
func synthOn(t *testing.T, names topics.Names, cfg SynthConfig) []SynthStep {
	t.Helper()
	steps, err := Synthesize(names, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func flatten(steps []SynthStep) []*kgo.Record {
	var out []*kgo.Record
	for _, s := range steps {
		out = append(out, s.Records()...)
	}
	return out
}

// feeder assigns partitions (one per run) and per-topic offsets in arrival order, as a broker would.
type feeder struct {
	e    *engine
	next map[tp]int64
	part map[string]int32
}

func newFeeder(e *engine) *feeder {
	return &feeder{e: e, next: map[tp]int64{}, part: map[string]int32{}}
}

func (f *feeder) add(recs ...*kgo.Record) {
	for _, r := range recs {
		c := *r
		p, ok := f.part[string(c.Key)]
		if !ok {
			p = int32(len(f.part))
			f.part[string(c.Key)] = p
		}
		c.Partition = p
		k := tp{c.Topic, p}
		c.Offset = f.next[k]
		f.next[k]++
		f.e.add(context.Background(), &c, time.Now())
	}
}

func (f *feeder) seal(t *testing.T) []*sealed {
	t.Helper()
	s, err := f.e.sealReady()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rowsOf(ss []*sealed) []topics.AdvantageRow {
	var rows []topics.AdvantageRow
	for _, s := range ss {
		rows = append(rows, s.rows...)
	}
	return rows
}

// referenceRows computes the expected output straight from the records with the correction
// package: an independent, naive implementation of the step join (decode everything, group by
// run/step/stream/group, fold steps in order, fast-forward late streams).
func referenceRows(t *testing.T, cfg correction.Config, recs []*kgo.Record) []topics.AdvantageRow {
	t.Helper()
	corr, err := correction.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		run  string
		step int64
	}
	manifests := map[key]topics.StepManifest{}
	pred := map[string]topics.PredictedReward{}
	exec := map[string]topics.ExecutedReward{}
	for _, r := range recs {
		switch r.Topic {
		case testNames.Steps():
			m, err := topics.DecodeStepRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			manifests[key{m.RunID, m.Step}] = m
		case testNames.Predicted():
			p, err := topics.DecodePredictedRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			pred[p.RunID+"|"+p.RolloutID] = p
		case testNames.Executed():
			x, err := topics.DecodeExecutedRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			exec[x.RunID+"|"+x.RolloutID] = x
		}
	}
	runs := map[string]bool{}
	for k := range manifests {
		runs[k.run] = true
	}
	var out []topics.AdvantageRow
	for run := range runs {
		states := map[string]*correction.State{}
		for v := int64(0); ; v++ {
			m, ok := manifests[key{run, v}]
			if !ok {
				break
			}
			groups := map[string][]correction.Group{}
			for _, g := range m.Groups {
				cg := correction.Group{ID: g.GroupID, Anchor: g.Anchor}
				for _, p := range pred {
					if p.RunID != run || p.Step != v || p.GroupID != g.GroupID {
						continue
					}
					ro := correction.Rollout{ID: p.RolloutID, Predicted: correction.Reward{OK: p.Status == topics.StatusOK}}
					if p.Score != nil {
						ro.Predicted.Score = *p.Score
					}
					if g.Anchor {
						x := exec[run+"|"+p.RolloutID]
						ro.Executed.OK = x.Score != nil && (x.Status == topics.StatusOK || x.Imputed)
						if x.Score != nil {
							ro.Executed.Score = *x.Score
						}
					}
					cg.Rollouts = append(cg.Rollouts, ro)
				}
				groups[g.Stream] = append(groups[g.Stream], cg)
			}
			for s := range groups {
				if states[s] == nil {
					st := corr.NewState(run, s)
					for i := int64(0); i < v; i++ {
						if _, err := corr.Advance(st, correction.Step{Run: run, Stream: s, Step: i}, nil); err != nil {
							t.Fatal(err)
						}
					}
					states[s] = st
				}
			}
			for s, st := range states {
				rows, next, err := corr.Correct(st, correction.Step{Run: run, Stream: s, Step: v, Groups: groups[s]})
				if err != nil {
					t.Fatal(err)
				}
				for i := range rows {
					out = append(out, toAdvantageRow(&rows[i], m.PolicyVersion))
				}
				states[s] = next
			}
		}
	}
	return out
}

var smallWorkload = SynthConfig{Runs: 2, Steps: 6, Groups: 4, GroupSize: 4, AnchorEvery: 2, Streams: 2, FailEvery: 7, Seed: 7}

func TestEngineMatchesReferenceInAnyArrivalOrder(t *testing.T) {
	steps := synth(t, smallWorkload)
	recs := flatten(steps)
	// Small MinPairs so that the small workload refits and the weight moves.
	def := correction.DefaultConfig()
	def.MinPairs = 4
	ref := correction.ReferenceConfig()
	ref.MinPairs, ref.RefitEvery, ref.FreezeAfter = 4, 4, 2
	cfgs := map[string]correction.Config{"default": def, "reference": ref}
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			want := topics.DigestRows(referenceRows(t, cfg, recs))
			wantRows := rollouts(smallWorkload)
			for trial := 0; trial < 6; trial++ {
				order := slices.Clone(recs)
				if trial > 0 {
					rng := rand.New(rand.NewPCG(uint64(trial), 99))
					rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				}
				f := newFeeder(testEngine(t, cfg))
				var got []*sealed
				for i, r := range order {
					f.add(r)
					if i%17 == 0 {
						got = append(got, f.seal(t)...)
					}
				}
				got = append(got, f.seal(t)...)
				rows := rowsOf(got)
				if len(rows) != wantRows {
					t.Fatalf("trial %d: %d rows, want %d", trial, len(rows), wantRows)
				}
				if err := topics.ValidateAdvantages(rows); err != nil {
					t.Fatalf("trial %d: %v", trial, err)
				}
				if d := topics.DigestRows(rows); d != want {
					t.Fatalf("trial %d: digest %s, want %s", trial, d, want)
				}
				if slices.IndexFunc(rows, func(r topics.AdvantageRow) bool { return r.CalibrationVersion > 0 }) < 0 {
					t.Fatal("no row used a fitted calibration: the workload does not exercise debiasing")
				}
				for _, s := range got {
					if len(s.snaps) != smallWorkload.Streams {
						t.Fatalf("run %s step %d: %d snapshots, want %d", s.run, s.step, len(s.snaps), smallWorkload.Streams)
					}
				}
				if n := f.e.bufferedSteps(); n != 0 {
					t.Fatalf("trial %d: %d steps left buffered", trial, n)
				}
			}
		})
	}
}

func TestEngineSealsStrictlyInOrder(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 3, Groups: 2, GroupSize: 3, AnchorEvery: 1, Seed: 1})
	f := newFeeder(testEngine(t, correction.DefaultConfig()))
	f.add(steps[2].Records()...)
	f.add(steps[1].Records()...)
	if s := f.seal(t); len(s) != 0 {
		t.Fatalf("sealed %d steps before step 0 arrived", len(s))
	}
	// Step 0 without its last executed reward is not complete.
	recs0 := steps[0].Records()
	f.add(recs0[:len(recs0)-1]...)
	if s := f.seal(t); len(s) != 0 {
		t.Fatalf("sealed incomplete step 0")
	}
	f.add(recs0[len(recs0)-1])
	got := f.seal(t)
	if len(got) != 3 {
		t.Fatalf("sealed %d steps, want 3", len(got))
	}
	for i, s := range got {
		if s.step != int64(i) {
			t.Fatalf("seal %d is step %d", i, s.step)
		}
	}
}

func TestEngineDuplicatesAndConflicts(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 2, Groups: 2, GroupSize: 3, AnchorEvery: 1, Seed: 3})
	recs := flatten(steps)
	want := topics.DigestRows(referenceRows(t, correction.DefaultConfig(), recs))

	e := testEngine(t, correction.DefaultConfig())
	f := newFeeder(e)
	f.add(steps[0].Records()...)
	// Identical redelivery of a predicted reward (another CreatedAt, same score) is a duplicate.
	p, _ := topics.DecodePredicted(steps[0].Rewards[0].Value)
	p.CreatedAt = p.CreatedAt.Add(time.Hour)
	p.LatencyMS = 12
	dup, _ := testNames.PredictedRecord(p)
	// A different score for the same rollout conflicts.
	other := 1 - *p.Score
	p.Score = &other
	conf, _ := testNames.PredictedRecord(p)
	// The manifest of step 1 arrives after a reward for a group it does not list.
	q, _ := topics.DecodePredicted(steps[1].Rewards[0].Value)
	q.GroupID = "not-in-manifest"
	stray, _ := testNames.PredictedRecord(q)
	f.add(stray)
	f.add(steps[1].Rewards...)
	f.add(dup, conf)
	f.add(steps[1].Manifest)
	// Rollout beyond the group size.
	q2, _ := topics.DecodePredicted(steps[1].Rewards[0].Value)
	q2.RolloutID = "extra"
	extra, _ := testNames.PredictedRecord(q2)
	f.add(extra)

	rows := rowsOf(f.seal(t))
	if d := topics.DigestRows(rows); d != want {
		t.Fatalf("digest %s, want %s", d, want)
	}
	if n := counterValue(e.m.records.WithLabelValues("predicted", resultDuplicate)); n != 1 {
		t.Fatalf("duplicates counted %v, want 1", n)
	}
	dl := e.takeDeadLetters(e.holdback())
	if len(dl) != 3 {
		t.Fatalf("%d dead letters, want 3 (conflict, stray group, extra rollout)", len(dl))
	}
	for _, r := range dl {
		d, err := topics.ParseDeadLetter(r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != "conflict" || d.Stage != "correct" || d.SourceTopic != testNames.Predicted() {
			t.Fatalf("dead letter %+v", d)
		}
	}
	// Re-reading sealed steps after a restart drops them.
	f.add(recs...)
	if s := f.seal(t); len(s) != 0 {
		t.Fatalf("re-read sealed steps produced %d seals", len(s))
	}
	if n := counterValue(e.m.records.WithLabelValues("predicted", resultSealed)); n == 0 {
		t.Fatal("sealed duplicates not counted")
	}
}

func TestEngineHoldbackAndDeadLetterRelease(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 1, Groups: 1, GroupSize: 2, AnchorEvery: 1, Seed: 5})
	e := testEngine(t, correction.DefaultConfig())
	f := newFeeder(e)
	recs := steps[0].Records()
	f.add(recs[:len(recs)-1]...) // all but the last executed reward: offsets 0.. per topic
	bad := &kgo.Record{Topic: testNames.Predicted(), Key: []byte("run-0"), Value: []byte("{not json")}
	f.add(bad) // predicted offset 2, after two buffered predicted rewards
	hold := e.holdback()
	if h := hold[tp{testNames.Predicted(), 0}]; h.off != 0 {
		t.Fatalf("predicted holdback %+v, want offset 0", h)
	}
	if got := e.takeDeadLetters(hold); len(got) != 0 {
		t.Fatalf("dead letter released before the commit passes its source")
	}
	f.add(recs[len(recs)-1])
	if s := f.seal(t); len(s) != 1 {
		t.Fatalf("want the step sealed")
	}
	hold = e.holdback()
	if len(hold) != 0 {
		t.Fatalf("holdback after seal: %v", hold)
	}
	dl := e.takeDeadLetters(hold)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	d, _ := topics.ParseDeadLetter(dl[0])
	if d.Reason != "malformed-json" || d.SourceOffset != 2 {
		t.Fatalf("dead letter %+v", d)
	}
}

func TestEngineLateStreamFastForward(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 4, Groups: 2, GroupSize: 3, AnchorEvery: 1, Streams: 2, Seed: 11})
	// Steps 0 and 1 only carry stream0: drop stream1's groups from the manifests and rewards.
	var recs []*kgo.Record
	for _, s := range steps {
		for _, r := range s.Records() {
			if s.Step < 2 {
				if st, _ := topics.HeaderValue(r.Headers, topics.HeaderStream); st == "stream1" {
					continue
				}
				if r.Topic == testNames.Steps() {
					m, _ := topics.DecodeStep(r.Value)
					m.Groups = slices.DeleteFunc(m.Groups, func(g topics.GroupManifest) bool { return g.Stream == "stream1" })
					r, _ = testNames.StepRecord(m)
				}
			}
			recs = append(recs, r)
		}
	}
	want := topics.DigestRows(referenceRows(t, correction.DefaultConfig(), recs))
	f := newFeeder(testEngine(t, correction.DefaultConfig()))
	f.add(recs...)
	got := f.seal(t)
	if len(got) != 4 {
		t.Fatalf("sealed %d steps", len(got))
	}
	if !slices.Equal(got[2].newStream, []string{"stream1"}) || len(got[1].snaps) != 1 || len(got[2].snaps) != 2 {
		t.Fatalf("stream1 should appear at step 2: new %v, snaps %d/%d", got[2].newStream, len(got[1].snaps), len(got[2].snaps))
	}
	if d := topics.DigestRows(rowsOf(got)); d != want {
		t.Fatalf("digest %s, want %s", d, want)
	}
	st, err := changelogOf(got, 2)[string(topics.CalibrationKey(got[2].run, "stream1"))].stateOf()
	if err != nil || st.SealedStep() != 2 || st.Stream() != "stream1" {
		t.Fatalf("fast-forwarded state: %v sealed %d", err, st.SealedStep())
	}
}

func TestEngineInstallResumes(t *testing.T) {
	steps := synth(t, smallWorkload)
	recs := flatten(steps)
	want := topics.DigestRows(referenceRows(t, correction.DefaultConfig(), recs))
	// First engine seals everything; a second one resumes from the states after step 2.
	e1 := testEngine(t, correction.DefaultConfig())
	f1 := newFeeder(e1)
	f1.add(recs...)
	all := f1.seal(t)
	e2 := testEngine(t, correction.DefaultConfig())
	byRun := map[string][]*correction.State{}
	var rows []topics.AdvantageRow
	log := changelogOf(all, 2)
	for _, s := range all {
		if s.step > 2 {
			continue
		}
		rows = append(rows, s.rows...)
		if s.step == 2 {
			for _, sn := range s.snaps {
				st, err := log[string(topics.CalibrationKey(sn.RunID, sn.Stream))].stateOf()
				if err != nil {
					t.Fatal(err)
				}
				byRun[s.run] = append(byRun[s.run], st)
			}
		}
	}
	for _, run := range slices.Sorted(maps.Keys(byRun)) {
		if err := e2.install(run, f1.part[run], byRun[run]); err != nil {
			t.Fatal(err)
		}
	}
	f2 := newFeeder(e2)
	f2.part = f1.part
	f2.add(recs...)
	rows = append(rows, rowsOf(f2.seal(t))...)
	if d := topics.DigestRows(rows); d != want {
		t.Fatalf("resumed digest %s, want %s", d, want)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

type correctionConfig = correction.Config

func defaultCorr() correction.Config { return correction.DefaultConfig() }

// TestEngineBogusExecutedRewardCannotStallAStep feeds an executed reward for a rollout the
// world model never scored, between the genuine ones, with the predicted rewards arriving before
// or after the executed ones: the bogus one is dead-lettered and the step still seals with the
// clean digest, whatever the order.
func TestEngineBogusExecutedRewardCannotStallAStep(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 1, Groups: 1, GroupSize: 2, AnchorEvery: 1, Seed: 5})
	want := topics.DigestRows(referenceRows(t, correction.DefaultConfig(), flatten(steps)))
	var pred, exec []*kgo.Record
	for _, r := range steps[0].Rewards {
		if r.Topic == testNames.Executed() {
			exec = append(exec, r)
		} else {
			pred = append(pred, r)
		}
	}
	if len(pred) != 2 || len(exec) != 2 {
		t.Fatalf("workload has %d predicted and %d executed rewards, want 2 and 2", len(pred), len(exec))
	}
	x, err := topics.DecodeExecuted(exec[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	x.RolloutID = "never-scored"
	bogus, err := testNames.ExecutedRecord(x)
	if err != nil {
		t.Fatal(err)
	}
	orders := map[string][]*kgo.Record{
		"predicted first": {steps[0].Manifest, pred[0], pred[1], exec[0], bogus, exec[1]},
		"executed first":  {steps[0].Manifest, exec[0], bogus, exec[1], pred[0], pred[1]},
		"interleaved":     {steps[0].Manifest, pred[0], exec[0], bogus, pred[1], exec[1]},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			e := testEngine(t, correction.DefaultConfig())
			f := newFeeder(e)
			var sealedRows []topics.AdvantageRow
			for _, r := range order {
				f.add(r)
				sealedRows = append(sealedRows, rowsOf(f.seal(t))...)
			}
			if d := topics.DigestRows(sealedRows); d != want {
				t.Fatalf("digest %s over %d rows, want %s (the step did not seal cleanly)", d, len(sealedRows), want)
			}
			dl := e.takeDeadLetters(e.holdback())
			if len(dl) != 1 {
				t.Fatalf("%d dead letters, want 1 (the bogus executed reward)", len(dl))
			}
			d, err := topics.ParseDeadLetter(dl[0])
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != "conflict" || !strings.Contains(d.Error, "never-scored") {
				t.Fatalf("dead letter %+v", d)
			}
		})
	}
}

// TestEngineRejectsMiskeyedRecords checks that a reward keyed by something other than its run id
// goes to the dead-letter topic: it may sit on another instance's partition, and a replay would
// not select it.
func TestEngineRejectsMiskeyedRecords(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 1, Groups: 1, GroupSize: 2, Seed: 7})
	e := testEngine(t, correction.DefaultConfig())
	f := newFeeder(e)
	r := *steps[0].Rewards[0]
	r.Key = []byte("someone-else")
	f.add(steps[0].Manifest, &r)
	dl := e.takeDeadLetters(e.holdback())
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	d, err := topics.ParseDeadLetter(dl[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != "invalid-field:key" {
		t.Fatalf("reason %q, want invalid-field:key (%s)", d.Reason, d.Error)
	}
}

// changelogOf is the compacted changelog of the sealed steps up to upTo: per (run, stream) the
// latest snapshot and the latest chunk of every slot, as readChangelog collects them.
func changelogOf(all []*sealed, upTo int64) map[string]*changelogState {
	out := map[string]*changelogState{}
	for _, s := range all {
		if s.step > upTo {
			continue
		}
		for i, sn := range s.snaps {
			key := string(topics.CalibrationKey(sn.RunID, sn.Stream))
			e := out[key]
			if e == nil {
				e = &changelogState{chunks: map[int]topics.CalibrationChunk{}}
				out[key] = e
			}
			for _, ch := range s.chunks[i] {
				e.chunks[ch.Slot] = ch.CalibrationChunk
			}
			e.snap, e.part = sn, s.part
		}
	}
	return out
}
