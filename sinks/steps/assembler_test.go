package steps

import (
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

var names = topics.NewNames("t.")

// smallChunk forces a 4x8-row step into several chunks.
const smallChunk = 4096

func TestAssemblerReassembly(t *testing.T) {
	rows := stepstest.StepRows("r1", 3, 4, 8)
	recs := stepstest.ChunkRecords(t, names, rows, smallChunk)
	if len(recs) < 3 {
		t.Fatalf("want at least 3 chunks for the test to mean anything, got %d", len(recs))
	}
	n := len(recs)
	other := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 3, 4, 8)[:5], smallChunk)
	step4 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 4, 4, 8), smallChunk)
	differ := stepstest.ChunkRecords(t, names, append([]topics.AdvantageRow(nil), rows...), smallChunk)
	differ[1] = stepstest.Mutate(t, differ[1])

	tests := []struct {
		name     string
		feed     []*kgo.Record
		wantErrs []error // one per reported error, in order
		wantDup  int64
		badAt    int64 // offset of the bad record: 100 unless set
	}{
		{name: "in order", feed: recs},
		{name: "reversed", feed: stepstest.Reverse(recs)},
		{name: "duplicate chunk", feed: append([]*kgo.Record{recs[0], recs[0]}, recs[1:]...), wantDup: 1},
		{name: "whole set twice", feed: append(append([]*kgo.Record(nil), recs...), recs...), wantDup: int64(n)},
		{name: "duplicate chunk differs", feed: append([]*kgo.Record{recs[1], differ[1]}, append([]*kgo.Record{recs[0]}, recs[2:]...)...), wantErrs: []error{ErrChunkMismatch}, badAt: 101},
		{name: "mismatched n", feed: append([]*kgo.Record{recs[0], other[0]}, recs[1:]...), wantErrs: []error{ErrChunkMismatch}, badAt: 101},
		{name: "missing chunk header", feed: append([]*kgo.Record{stepstest.WithoutHeader(recs[0], topics.HeaderChunk)}, recs...), wantErrs: []error{topics.ErrBadHeader}},
		{name: "chunk index out of range", feed: append([]*kgo.Record{stepstest.WithHeader(recs[0], topics.HeaderChunk, "5/2")}, recs...), wantErrs: []error{topics.ErrBadHeader}},
		{name: "missing run header", feed: append([]*kgo.Record{stepstest.WithoutHeader(recs[0], topics.HeaderRun)}, recs...), wantErrs: []error{topics.ErrBadHeader}},
		{name: "bad step header", feed: append([]*kgo.Record{stepstest.WithHeader(recs[0], topics.HeaderStep, "03")}, recs...), wantErrs: []error{topics.ErrBadHeader}},
		{name: "key differs from run", feed: append([]*kgo.Record{rekey(recs[0], "r2")}, recs...), wantErrs: []error{topics.ErrBadHeader}},
		{name: "wrong schema header", feed: append([]*kgo.Record{stepstest.WithHeader(recs[0], topics.HeaderSchema, "wmrl.advantages.v3")}, recs...), wantErrs: []error{topics.ErrUnknownSchema}},
		{name: "rows header disagrees", feed: append([]*kgo.Record{stepstest.WithHeader(recs[0], topics.HeaderRows, "9999")}, recs...), wantErrs: []error{topics.ErrConflict}},
		{name: "undecodable payload", feed: append([]*kgo.Record{stepstest.Revalue(recs[0], []byte("not arrow"))}, recs...), wantErrs: []error{topics.ErrMalformed}},
		{name: "rows of another step", feed: append([]*kgo.Record{stepstest.WithHeader(step4[0], topics.HeaderStep, "3")}, recs...), wantErrs: []error{topics.ErrConflict}},
		{name: "control record", feed: append([]*kgo.Record{{Attrs: controlAttrs(), Value: []byte{0, 0, 0, 0}}}, recs...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAssembler(AssemblerConfig{})
			var steps []*Step
			var errs []error
			for _, r := range stepstest.Placed(tc.feed, 0, 100) {
				s, e := a.Add(r)
				steps = append(steps, s...)
				errs = append(errs, e...)
			}
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("errors %v, want %d", errs, len(tc.wantErrs))
			}
			if tc.badAt == 0 {
				tc.badAt = 100
			}
			for i, err := range errs {
				var re *RecordError
				if !errors.As(err, &re) || re.Pos.Partition != 0 || re.Pos.Offset != tc.badAt || !errors.Is(err, tc.wantErrs[i]) {
					t.Errorf("error %d = %v, want a *RecordError at offset %d wrapping %v", i, err, tc.badAt, tc.wantErrs[i])
				}
			}
			if len(steps) != 1 {
				t.Fatalf("%d steps delivered, want 1", len(steps))
			}
			if !reflect.DeepEqual(steps[0].Rows, rows) {
				t.Fatalf("reassembled rows differ from the produced rows")
			}
			if steps[0].Run != "r1" || steps[0].Step != 3 || len(steps[0].Records) != n {
				t.Fatalf("step %s/%d with %d records, want r1/3 with %d", steps[0].Run, steps[0].Step, len(steps[0].Records), n)
			}
			if st := a.Stats(); st.Duplicates != tc.wantDup || st.Skipped != int64(len(tc.wantErrs)) {
				t.Fatalf("stats %+v, want %d duplicates, %d skipped", st, tc.wantDup, len(tc.wantErrs))
			}
		})
	}
}

func TestAssemblerStepOrderAndOffsets(t *testing.T) {
	s5 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 5, 4, 8), smallChunk)
	s6 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 6, 1, 4), smallChunk)
	// Step 5's last chunk arrives after all of step 6.
	feed := stepstest.Placed(append(append(append([]*kgo.Record(nil), s5[:len(s5)-1]...), s6...), s5[len(s5)-1]), 2, 10)
	a := NewAssembler(AssemblerConfig{})
	var got []int64
	for i, r := range feed {
		steps, errs := a.Add(r)
		if len(errs) > 0 {
			t.Fatalf("record %d: %v", i, errs)
		}
		for _, s := range steps {
			got = append(got, s.Step)
		}
		if i == len(feed)-2 {
			if len(got) != 0 {
				t.Fatalf("step 6 delivered before step 5: %v", got)
			}
			if c := a.Offsets().Committable(); c["t.advantages.v1"][2] != 10 {
				t.Fatalf("committable %v while step 5 is incomplete, want 10", c)
			}
		}
	}
	if !reflect.DeepEqual(got, []int64{5, 6}) {
		t.Fatalf("delivery order %v, want [5 6]", got)
	}
	if c := a.Offsets().Committable(); c["t.advantages.v1"][2] != 10 {
		t.Fatalf("committable %v before any release, want 10", c)
	}
}

func TestAssemblerReleaseCommitsOnlyBelowOldestUnacked(t *testing.T) {
	s1 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 1, 1, 4), smallChunk)
	s2 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 2, 1, 4), smallChunk)
	a := NewAssembler(AssemblerConfig{})
	var steps []*Step
	for _, r := range stepstest.Placed(append(append([]*kgo.Record(nil), s1...), s2...), 0, 0) {
		s, _ := a.Add(r)
		steps = append(steps, s...)
	}
	if len(steps) != 2 {
		t.Fatalf("%d steps", len(steps))
	}
	topic := names.Advantages()
	a.Release(steps[1])
	if c := a.Offsets().Committable(); c[topic][0] != 0 && len(c) != 0 {
		t.Fatalf("after acking only step 2: committable %v, want nothing past step 1's offset 0", c)
	}
	a.Release(steps[0])
	want := int64(len(s1) + len(s2))
	c := a.Offsets().Committable()
	if c[topic][0] != want {
		t.Fatalf("after acking both: committable %v, want %d", c, want)
	}
	a.Offsets().MarkCommitted(c)
	if c := a.Offsets().Committable(); len(c) != 0 {
		t.Fatalf("committable %v after MarkCommitted, want none", c)
	}
}

func TestAssemblerRedeliveryAndStale(t *testing.T) {
	s1 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 1, 4, 8), smallChunk)
	s0 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 0, 1, 4), smallChunk)
	changed := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 1, 4, 8), smallChunk)
	changed[0] = stepstest.Mutate(t, changed[0])
	rechunked := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 1, 4, 8), 1<<20)

	a := NewAssembler(AssemblerConfig{})
	feed := append(append([]*kgo.Record(nil), s1...), s1...) // a replayed copy: ignored
	feed = append(feed, changed[0], rechunked[0], s0[0])
	var steps []*Step
	var errs []error
	for _, r := range stepstest.Placed(feed, 0, 0) {
		s, e := a.Add(r)
		steps = append(steps, s...)
		errs = append(errs, e...)
	}
	if len(steps) != 1 {
		t.Fatalf("%d steps delivered, want 1", len(steps))
	}
	want := []error{ErrChunkMismatch, ErrChunkMismatch, ErrStale}
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want %v", errs, want)
	}
	for i := range want {
		if !errors.Is(errs[i], want[i]) {
			t.Errorf("error %d = %v, want %v", i, errs[i], want[i])
		}
	}
	if d := a.Stats().Duplicates; d != int64(len(s1)) {
		t.Fatalf("duplicates %d, want %d", d, len(s1))
	}
}

func TestAssemblerAbandonsBrokenStep(t *testing.T) {
	broken := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 0, 4, 8), smallChunk)[:1]
	feed := append([]*kgo.Record(nil), broken...)
	for s := int64(1); s <= 3; s++ {
		feed = append(feed, stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", s, 1, 2), smallChunk)...)
	}
	a := NewAssembler(AssemblerConfig{MaxBufferedSteps: 2})
	var got []int64
	var errs []error
	for _, r := range stepstest.Placed(feed, 0, 0) {
		s, e := a.Add(r)
		for _, st := range s {
			got = append(got, st.Step)
		}
		errs = append(errs, e...)
	}
	if !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("delivered %v, want [1 2 3]", got)
	}
	var re *RecordError
	if len(errs) != 1 || !errors.Is(errs[0], ErrAbandoned) || !errors.As(errs[0], &re) || re.Step != 0 || re.Pos.Offset != 0 {
		t.Fatalf("errors %v, want one ErrAbandoned naming step 0 at offset 0", errs)
	}
	if c := a.Offsets().Committable(); c[names.Advantages()][0] != 1 {
		t.Fatalf("committable %v, want 1 (abandoned step released, delivered steps still held)", c)
	}
}

func TestAssemblerRunFilter(t *testing.T) {
	r1 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 0, 1, 4), smallChunk)
	r2 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r2", 0, 1, 4), smallChunk)
	a := NewAssembler(AssemblerConfig{Run: "r2"})
	var got []string
	for _, r := range stepstest.Placed(append(append([]*kgo.Record(nil), r1...), r2...), 0, 0) {
		s, e := a.Add(r)
		if len(e) > 0 {
			t.Fatal(e)
		}
		for _, st := range s {
			got = append(got, st.Run)
		}
	}
	if !reflect.DeepEqual(got, []string{"r2"}) || a.Stats().Filtered != int64(len(r1)) {
		t.Fatalf("delivered %v, stats %+v; want only r2 and %d filtered", got, a.Stats(), len(r1))
	}
}

func TestAssemblerDropPartition(t *testing.T) {
	s0 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 0, 4, 8), smallChunk)
	a := NewAssembler(AssemblerConfig{})
	for _, r := range stepstest.Placed(s0[:1], 1, 0) {
		a.Add(r)
	}
	a.DropPartition(names.Advantages(), 1)
	if inc := a.Incomplete(); len(inc) != 0 {
		t.Fatalf("incomplete after drop: %v", inc)
	}
	// After a re-assignment the same records are read again from the committed offset.
	var steps []*Step
	for _, r := range stepstest.Placed(s0, 1, 0) {
		s, e := a.Add(r)
		if len(e) > 0 {
			t.Fatal(e)
		}
		steps = append(steps, s...)
	}
	if len(steps) != 1 {
		t.Fatalf("%d steps after re-reading a dropped partition, want 1", len(steps))
	}
}

func rekey(r *kgo.Record, key string) *kgo.Record {
	c := *r
	c.Key = []byte(key)
	return &c
}

func controlAttrs() kgo.RecordAttrs {
	return kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true})
}

// TestAssemblerDropPartitionKeepsOtherPartitions feeds a step whose chunks span two partitions,
// drops one of them, and checks that the chunks on the partition still assigned stay held (not
// committable) and that the step completes once the dropped chunk is read again.
func TestAssemblerDropPartitionKeepsOtherPartitions(t *testing.T) {
	s0 := stepstest.ChunkRecords(t, names, stepstest.StepRows("r1", 0, 4, 8), smallChunk)
	if len(s0) < 3 {
		t.Fatalf("want at least 3 chunks, got %d", len(s0))
	}
	topic := names.Advantages()
	a := NewAssembler(AssemblerConfig{})
	// chunk 0 on partition 1, chunk 1 on partition 2; the rest is not read yet.
	onP1 := stepstest.Placed(s0[:1], 1, 0)
	onP2 := stepstest.Placed(s0[1:2], 2, 10)
	for _, r := range append(onP1, onP2...) {
		if s, e := a.Add(r); len(s) > 0 || len(e) > 0 {
			t.Fatalf("partial step: steps %v, errors %v", s, e)
		}
	}
	a.DropPartition(topic, 1)
	if at := a.Offsets().Committable()[topic][2]; at != 10 {
		t.Fatalf("partition 2 committable at %d after dropping partition 1, want 10: its chunk there was never delivered", at)
	}
	if inc := a.Incomplete(); len(inc) != 1 || !errors.Is(inc[0], ErrIncomplete) {
		t.Fatalf("incomplete after drop = %v, want the step kept on partition 2", inc)
	}
	// Partition 1 is re-assigned and read again; the remaining chunks follow on partition 2.
	var steps []*Step
	for _, r := range append(stepstest.Placed(s0[:1], 1, 0), stepstest.Placed(s0[2:], 2, 11)...) {
		s, e := a.Add(r)
		if len(e) > 0 {
			t.Fatal(e)
		}
		steps = append(steps, s...)
	}
	if len(steps) != 1 || !reflect.DeepEqual(steps[0].Rows, stepstest.StepRows("r1", 0, 4, 8)) {
		t.Fatalf("%d steps after re-reading the dropped chunk, want the whole step once", len(steps))
	}
	if got := a.Offsets().Committable()[topic][2]; got != 10 {
		t.Fatalf("partition 2 committable at %d before release, want 10 (held)", got)
	}
	a.Offsets().MarkCommitted(map[string]map[int32]int64{topic: {2: 10}})
	a.Release(steps[0])
	if got := a.Offsets().Committable()[topic][2]; got != int64(11+len(s0)-2) {
		t.Fatalf("partition 2 committable at %d after release, want %d", got, 11+len(s0)-2)
	}
}
