package topics

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDistinctSorted holds the allocation-free duplicate check to the map it stands in for: on
// random batches in canonical order (several runs, steps, streams, with and without duplicates
// across streams) it must never call a batch with a duplicate distinct, and must call every
// duplicate-free batch of at most 8 streams per step distinct; out of order, it must not decide.
func TestDistinctSorted(t *testing.T) {
	hasDup := func(rows []AdvantageRow) bool {
		type key struct {
			run   string
			step  int64
			group string
			id    string
		}
		seen := map[key]bool{}
		for _, r := range rows {
			k := key{r.RunID, r.Step, r.GroupID, r.RolloutID}
			if seen[k] {
				return true
			}
			seen[k] = true
		}
		return false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		streams := 1 + rng.IntN(10)
		dupChance := rng.IntN(3) == 0
		var rows []AdvantageRow
		for run := range 1 + rng.IntN(2) {
			for step := range 1 + rng.IntN(3) {
				for g := range 1 + rng.IntN(12) {
					stream := g % streams
					if dupChance && rng.IntN(20) == 0 {
						stream = rng.IntN(streams) // the group may now sit in two streams
					}
					for r := range 1 + rng.IntN(3) {
						rows = append(rows, AdvantageRow{RunID: fmt.Sprintf("run%d", run), Step: int64(step),
							Stream: fmt.Sprintf("s%d", stream), GroupID: fmt.Sprintf("g%02d", g), RolloutID: fmt.Sprintf("g%02d-%d", g, r)})
					}
					if dupChance && rng.IntN(10) == 0 { // the same group again, in another stream
						rows = append(rows, AdvantageRow{RunID: fmt.Sprintf("run%d", run), Step: int64(step),
							Stream: fmt.Sprintf("s%d", (stream+1)%streams), GroupID: fmt.Sprintf("g%02d", g), RolloutID: fmt.Sprintf("g%02d-0", g)})
					}
				}
			}
		}
		SortRows(rows)
		sorted := true
		for i := 1; i < len(rows); i++ {
			a, b := rows[i-1], rows[i]
			if a.RunID == b.RunID && a.Step == b.Step && a.Stream == b.Stream && a.GroupID == b.GroupID && a.RolloutID == b.RolloutID {
				sorted = false // an exact repeat is not strictly increasing
			}
		}
		dup := hasDup(rows)
		got := distinctSorted(rows)
		if got && dup {
			t.Fatalf("trial %d: a batch with a duplicate passed as distinct", trial)
		}
		if !dup && sorted && streams <= 8 && !got {
			t.Fatalf("trial %d: a sorted duplicate-free batch of %d streams was not recognised", trial, streams)
		}
		if len(rows) > 1 {
			rows[0], rows[len(rows)-1] = rows[len(rows)-1], rows[0]
			if distinctSorted(rows) && rows[0] != rows[len(rows)-1] {
				t.Fatalf("trial %d: a batch out of order passed", trial)
			}
		}
	}
}

// TestValidateAdvantagesDuplicateAcrossStreams: a rollout in two streams of one step is refused,
// naming the later row, whichever path finds it.
func TestValidateAdvantagesDuplicateAcrossStreams(t *testing.T) {
	rows := manyRows(16)
	for i := range rows {
		rows[i].Stream = fmt.Sprintf("s%d", i/8)
	}
	if err := ValidateAdvantages(rows); err != nil {
		t.Fatalf("two streams, distinct groups: %v", err)
	}
	rows[8].GroupID, rows[8].RolloutID = rows[0].GroupID, rows[0].RolloutID
	SortRows(rows)
	err := ValidateAdvantages(rows)
	if err == nil {
		t.Fatal("a rollout in two streams passed")
	}
	if want := "advantages row 8: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("got %v, want it to name row 8", err)
	}
}
