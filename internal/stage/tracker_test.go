package stage

import "testing"

func TestTrackerCommitsBelowLowestUnfinished(t *testing.T) {
	tr := newTracker()
	tr.assign(map[string][]int32{"in": {0, 1}})
	for o := int64(10); o < 15; o++ {
		if !tr.start("in", 0, o, 3) {
			t.Fatalf("start %d refused", o)
		}
	}
	type step struct {
		finish   int64
		handBack bool
		want     int64 // expected commit point of in/0, -1 = nothing to commit
	}
	steps := []step{
		{finish: 12, want: 10}, // 10 still in flight
		{finish: 14, want: -1}, // commit point unchanged: nothing new to commit
		{finish: 10, want: 11}, // lowest unfinished is now 11
		{finish: 11, want: 13},
		{finish: 13, handBack: true, want: -1}, // 13 handed back: commit point stays at 13, already committed
	}
	for i, st := range steps {
		if st.handBack {
			tr.handBack("in", 0, st.finish)
		} else {
			tr.finish("in", 0, st.finish)
		}
		c := tr.committable(nil)
		got := int64(-1)
		if at, ok := c["in"][0]; ok {
			got = at.offset
			if at.epoch != 3 {
				t.Fatalf("step %d: epoch %d", i, at.epoch)
			}
			tr.committedAt(c)
		}
		if got != st.want {
			t.Fatalf("step %d: commit point %d, want %d", i, got, st.want)
		}
		if _, ok := c["in"][1]; ok {
			t.Fatalf("step %d: untouched partition 1 committed", i)
		}
	}
	if n := tr.inflight(nil); n != 0 {
		t.Fatalf("inflight %d after all finished or handed back", n)
	}
}

func TestTrackerRevokedPartitionRefusesRecords(t *testing.T) {
	tr := newTracker()
	tr.assign(map[string][]int32{"in": {0}})
	if !tr.start("in", 0, 0, 0) {
		t.Fatal("assigned partition refused")
	}
	tr.revoke(map[string][]int32{"in": {0}})
	if tr.start("in", 0, 1, 0) {
		t.Fatal("revoked partition accepted a record")
	}
	if tr.start("other", 0, 1, 0) {
		t.Fatal("never-assigned partition accepted a record")
	}
	tr.finish("in", 0, 0) // finishing after revoke must not panic or resurrect the partition
	if len(tr.committable(nil)) != 0 {
		t.Fatal("revoked partition still committable")
	}
}

// TestTrackerCommitEpochIsTheCommitPointsRecord checks that the committed leader epoch belongs
// to the record at the commit point, not to the newest dispatched record.
func TestTrackerCommitEpochIsTheCommitPointsRecord(t *testing.T) {
	tr := newTracker()
	tr.assign(map[string][]int32{"in": {0}})
	tr.start("in", 0, 5, 1)
	tr.start("in", 0, 6, 2) // a leader change between the two records
	at := tr.committable(nil)["in"][0]
	if at.offset != 5 || at.epoch != 1 {
		t.Fatalf("commit %+v, want offset 5 with the epoch of record 5 (1)", at)
	}
	tr.finish("in", 0, 5)
	tr.finish("in", 0, 6)
	at = tr.committable(nil)["in"][0]
	if at.offset != 7 || at.epoch != 2 {
		t.Fatalf("commit %+v, want offset 7 with the newest epoch (2)", at)
	}
}
