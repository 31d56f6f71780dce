package correct

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// endedAt is the created_at of endRecord's markers.
var endedAt = time.Unix(1_700_000_000, 0).UTC()

// The life of an ended run's changelog keys: its retirement queues its end record on its
// partition; an engine rebuilt from that changelog installs only the live run and judges the
// ended run's records against its end; the retention tombstones every key of the run (chunk
// slots, snapshots, end) on its partition, the run's records are still dead-lettered for one more
// retention, and after that the run id is unknown.
func TestEngineEndedRunChangelog(t *testing.T) {
	wl := SynthConfig{Runs: 2, Steps: 5, Groups: 2, GroupSize: 3, AnchorEvery: 1, Streams: 2, Seed: 3}
	steps := synth(t, wl)
	const run, last = "run-0", int64(3)
	var input, late []*kgo.Record
	for _, s := range steps {
		if s.Run == run && s.Step > last {
			late = append(late, s.Records()...)
			continue
		}
		input = append(input, s.Records()...)
	}
	input = append(input, endRecord(t, run, last))
	f := newFeeder(testEngine(t, defaultCorr()))
	f.add(input...)
	all := f.seal(t)
	out, err := f.e.takeChangelog()
	if err != nil {
		t.Fatal(err)
	}
	if len(out.recs) != 1 || len(out.ends) != 1 {
		t.Fatalf("changelog records %d, ends %d; want the one end record", len(out.recs), len(out.ends))
	}
	r := out.recs[0]
	end, err := topics.DecodeCalibrationEndRecord(r)
	want := topics.CalibrationEnd{RunID: run, LastStep: last, EndedAt: endedAt, Reason: topics.EndReasonMarker}
	if err != nil || end != want || string(r.Key) != run || r.Partition != f.part[run] || r.Topic != testNames.Calibration() {
		t.Fatalf("end record %s/%d key %q: %+v, %v; want %+v on partition %d", r.Topic, r.Partition, r.Key, end, err, want, f.part[run])
	}
	if again, _ := f.e.takeChangelog(); !again.empty() {
		t.Fatal("the end record is queued twice")
	}

	// A rebuild from the changelog: the ended run's end and slots, the live run's states.
	log := changelogOf(all, int64(wl.Steps))
	e2 := testEngine(t, defaultCorr())
	slots := map[string]int{}
	for _, ent := range log {
		if ent.snap.RunID != run {
			st, err := ent.stateOf()
			if err != nil {
				t.Fatal(err)
			}
			rb := e2.runs[ent.snap.RunID]
			if rb == nil {
				if err := e2.install(ent.snap.RunID, ent.part, []*correction.State{st}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			rb.states[st.Stream()] = st
			continue
		}
		for slot := range ent.chunks {
			slots[ent.snap.Stream] = max(slots[ent.snap.Stream], slot+1)
		}
	}
	e2.installEnded(end, f.part[run], slots)
	if !maps.Equal(slots, changelogSlots(statesOf(t, all, run))) {
		t.Fatalf("slots in the changelog %v, slots the engine counts %v", slots, changelogSlots(statesOf(t, all, run)))
	}
	f2 := newFeeder(e2)
	f2.part = f.part
	f2.next = f.next
	f2.add(late...)
	f2.add(steps[0].Manifest) // a re-sent manifest of a sealed step of the ended run
	if got := reasonsOf(drainDeadLetters(t, e2)); len(got) != 1 || got[reasonRunEnded] != len(late) {
		t.Fatalf("records of the ended run after a rebuild: dead letters %v, want %d run_ended", got, len(late))
	}
	if n := e2.activeRuns(); n != 1 {
		t.Fatalf("%d active runs after the rebuild, want the live one", n)
	}

	// Retention.
	const retention = time.Hour
	e2.expireEnded(endedAt.Add(retention-time.Millisecond), retention)
	if out, _ := e2.takeChangelog(); !out.empty() {
		t.Fatalf("tombstones before the retention: %d records", len(out.recs))
	}
	e2.expireEnded(endedAt.Add(retention), retention)
	out, err = e2.takeChangelog()
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{run}
	for s, n := range slots {
		wantKeys = append(wantKeys, string(topics.CalibrationKey(run, s)))
		for slot := range n {
			wantKeys = append(wantKeys, string(topics.CalibrationChunkKey(run, s, slot)))
		}
	}
	var keys []string
	for _, r := range out.recs {
		if r.Value != nil || r.Partition != f.part[run] || r.Topic != testNames.Calibration() {
			t.Fatalf("tombstone %s/%d key %q with %d bytes", r.Topic, r.Partition, r.Key, len(r.Value))
		}
		keys = append(keys, string(r.Key))
	}
	if slices.Sort(keys); !slices.Equal(keys, slices.Sorted(slices.Values(wantKeys))) || !slices.Equal(out.tombed, []string{run}) {
		t.Fatalf("tombstones %v (runs %v), want %v", keys, out.tombed, wantKeys)
	}
	if last := string(out.recs[len(out.recs)-1].Key); last != run {
		t.Fatalf("last tombstone %q, want the end record's: a reader must not lose the end before the states", last)
	}
	// Tombstoned: still judged by its end for one more retention, then unknown.
	e2.expireEnded(endedAt.Add(2*retention-time.Millisecond), retention)
	f2.add(late[0])
	if got := reasonsOf(drainDeadLetters(t, e2)); got[reasonRunEnded] != 1 {
		t.Fatalf("a record of a tombstoned run: dead letters %v, want run_ended", got)
	}
	e2.expireEnded(endedAt.Add(2*retention), retention)
	if _, ok := e2.ended[run]; ok {
		t.Fatal("the tombstoned run is still remembered two retentions after its end")
	}
	f2.add(late[0])
	if got := drainDeadLetters(t, e2); len(got) != 0 || e2.activeRuns() != 2 {
		t.Fatalf("a record of a forgotten run: dead letters %v, %d active runs; want it buffered as a new run", got, e2.activeRuns())
	}
	if out, _ := e2.takeChangelog(); !out.empty() {
		t.Fatal("a forgotten run is tombstoned again")
	}
}

// statesOf returns run's states after the last step all sealed.
func statesOf(t *testing.T, all []*sealed, run string) map[string]*correction.State {
	t.Helper()
	out := map[string]*correction.State{}
	for _, s := range all {
		if s.run != run {
			continue
		}
		for i, sn := range s.snaps {
			out[sn.Stream] = s.states[i]
		}
	}
	return out
}

// A reader of the changelog applies tombstones: a chunk slot, a (run, stream)'s snapshot with
// what is left of its chunks, a run's end.
func TestChangelogTombstones(t *testing.T) {
	states := map[string]*changelogState{
		"r/a": {snap: topics.CalibrationSnapshot{RunID: "r", Stream: "a"}, chunks: map[int]topics.CalibrationChunk{0: {}, 1: {}}},
		"r/b": {snap: topics.CalibrationSnapshot{RunID: "r", Stream: "b"}, chunks: map[int]topics.CalibrationChunk{0: {}}},
		"q/a": {snap: topics.CalibrationSnapshot{RunID: "q", Stream: "a"}, chunks: map[int]topics.CalibrationChunk{0: {}}},
	}
	ends := map[string]changelogEnd{"r": {}, "q": {}}
	for _, k := range []string{"r/a/0", "r/a/1", "r/a", "r/b", "r", "q/a/7", "nobody/x/0"} {
		tombstone(states, ends, []byte(k))
	}
	if !slices.Equal(slices.Sorted(maps.Keys(states)), []string{"q/a"}) || len(states["q/a"].chunks) != 1 {
		t.Fatalf("states after the tombstones: %v", slices.Sorted(maps.Keys(states)))
	}
	if !slices.Equal(slices.Sorted(maps.Keys(ends)), []string{"q"}) {
		t.Fatalf("ends after the tombstones: %v", slices.Sorted(maps.Keys(ends)))
	}
}
