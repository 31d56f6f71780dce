package correction

import (
	"slices"
	"testing"
)

// TestFIFOCloneIsolation pushes and pops across chunk boundaries on a fifo
// and on clones of it, checking each against a plain slice model: writes to
// a clone never show through to the original or to other clones.
func TestFIFOCloneIsolation(t *testing.T) {
	r := &splitMix64{s: 5}
	const W = 1300
	type pairFIFO struct {
		f     fifo
		model []pair
	}
	all := []*pairFIFO{{}}
	for round := range 400 {
		src := all[int(r.next()%uint64(len(all)))]
		cur := src
		if r.next()%3 == 0 {
			cur = &pairFIFO{f: src.f.clone(), model: slices.Clone(src.model)}
			all = append(all, cur)
		}
		for range int(r.next() % 200) {
			p := unitPair(r.u(), float64(round))
			if cur.f.len() == W {
				if got := cur.f.pop(); got != cur.model[0] {
					t.Fatalf("round %d: popped %v, want %v", round, got, cur.model[0])
				}
				cur.model = cur.model[1:]
			}
			cur.f.push(p)
			cur.model = append(cur.model, p)
		}
		if r.next()%5 == 0 {
			for cur.f.len() > 0 && r.next()%4 != 0 {
				cur.f.pop()
				cur.model = cur.model[1:]
			}
		}
		for i, q := range all {
			if !slices.Equal(q.f.pairs(), q.model) || q.f.len() != len(q.model) {
				t.Fatalf("round %d: fifo %d diverged from its model", round, i)
			}
		}
	}
}
