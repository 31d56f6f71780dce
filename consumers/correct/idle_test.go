package correct

import (
	"slices"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// An idle run is ended by the end-of-run record the engine queues: it names the last sealed step,
// goes to the steps topic on the run's partition with reason idle, and, read back, dead-letters
// the step the trainer left incomplete (manifest included) as run_ended; a second copy is harmless; a replay of the input topics with the record in
// place gives the live rows; and a run that sealed on after the decision ignores it.
func TestEngineIdleEnd(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 3, Groups: 2, GroupSize: 2, AnchorEvery: 1, Seed: 9})
	const run, timeout = "run-0", time.Hour
	// Steps 0 and 1 complete; step 2 has its manifest and one reward: the trainer died.
	input := append(flatten(steps[:2]), steps[2].Manifest, steps[2].Rewards[0])
	cfg := defaultCorr()
	f := newFeeder(testEngine(t, cfg))
	f.add(input...)
	live := f.seal(t)

	if err := f.e.idleEnds(time.Now().Add(timeout/2), timeout); err != nil || len(f.e.pendIdle) != 0 {
		t.Fatalf("idle end before the timeout: %d records, %v", len(f.e.pendIdle), err)
	}
	if err := f.e.idleEnds(time.Now().Add(timeout), timeout); err != nil {
		t.Fatal(err)
	}
	if err := f.e.idleEnds(time.Now().Add(2*timeout), timeout); err != nil {
		t.Fatal(err)
	}
	out, err := f.e.takeChangelog()
	if err != nil || out.idle != 1 || len(out.recs) != 1 {
		t.Fatalf("idle records %d of %d, %v; want one, queued once", out.idle, len(out.recs), err)
	}
	idle := out.recs[0]
	m, err := topics.DecodeStep(idle.Value)
	if reason, _ := topics.HeaderValue(idle.Headers, topics.HeaderEndReason); err != nil || !m.EndOfRun || m.Step != 1 ||
		reason != topics.EndReasonIdle || idle.Topic != testNames.Steps() || idle.Partition != f.part[run] || string(idle.Key) != run {
		t.Fatalf("idle record %s/%d key %q reason %q: %+v, %v", idle.Topic, idle.Partition, idle.Key, reason, m, err)
	}

	f.add(idle, idle) // read back, and a duplicate (an instance that decided again after a crash)
	if n := f.e.activeRuns(); n != 0 {
		t.Fatalf("%d active runs after the idle end", n)
	}
	if h := f.e.holdback(); len(h) != 0 {
		t.Fatalf("holdback %v after the idle end: the dead trainer's records still hold the commit", h)
	}
	dls := reasonsOf(drainDeadLetters(t, f.e))
	if len(dls) != 1 || dls[reasonRunEnded] != 2 {
		t.Fatalf("dead letters %v, want the incomplete step's manifest and reward as run_ended", dls)
	}
	out, _ = f.e.takeChangelog()
	if len(out.ends) != 1 || out.ends[0].Reason != topics.EndReasonIdle || out.ends[0].LastStep != 1 {
		t.Fatalf("changelog ends %+v, want run-0 ended idle at step 1", out.ends)
	}

	// A replay reads the idle record where the live consumer did.
	r := newFeeder(testEngine(t, cfg))
	r.add(append(slices.Clone(input), idle)...)
	if d, w := topics.DigestRows(rowsOf(r.seal(t))), topics.DigestRows(rowsOf(live)); d != w {
		t.Fatalf("replay digest %s, live %s", d, w)
	}
	if got := reasonsOf(drainDeadLetters(t, r.e)); !mapsEqual(got, dls) {
		t.Fatalf("replay dead letters %v, live %v", got, dls)
	}

	// The run went on between the decision and the record: the record is ignored.
	g := newFeeder(testEngine(t, cfg))
	g.add(flatten(steps[:1])...)
	g.seal(t)
	if err := g.e.idleEnds(time.Now().Add(timeout), timeout); err != nil {
		t.Fatal(err)
	}
	stale := g.e.takeIdle()
	g.add(flatten(steps[1:2])...)
	g.seal(t)
	g.add(stale...)
	g.seal(t)
	if n, dl := g.e.activeRuns(), drainDeadLetters(t, g.e); n != 1 || len(dl) != 0 {
		t.Fatalf("a stale idle record: %d active runs, dead letters %v; want the run alive, no dead letter", n, dl)
	}
	// A run without a sealed step is not ended.
	h := newFeeder(testEngine(t, cfg))
	h.add(steps[0].Manifest)
	if err := h.e.idleEnds(time.Now().Add(timeout), timeout); err != nil || len(h.e.takeIdle()) != 0 {
		t.Fatalf("idle end of a run without a sealed step: %v", err)
	}
	// Input resets the clock.
	if err := g.e.idleEnds(time.Now().Add(timeout-time.Minute), timeout); err != nil || len(g.e.takeIdle()) != 0 {
		t.Fatalf("idle end although the run had input: %v", err)
	}
}
