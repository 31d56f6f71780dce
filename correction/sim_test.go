package correction

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// simulate mirrors simulate() in bench/reference_bench.py draw for draw: 8
// groups of 8 rollouts per step, the first 2 groups anchors. The world model
// sees t² plus Irwin–Hall noise, clamped and quantised to 0.05 (ties).
func simulate(run, stream string, steps int, seed uint64) []Step {
	r := &splitMix64{s: seed}
	out := make([]Step, steps)
	for v := range out {
		st := Step{Run: run, Stream: stream, Step: int64(v), Groups: make([]Group, 8)}
		for g := range st.Groups {
			a := r.u()
			grp := Group{ID: fmt.Sprintf("g%d", g), Anchor: g < 2, Rollouts: make([]Rollout, 8)}
			for k := range grp.Rollouts {
				t := 0.3*a + 0.7*r.u()
				n1 := r.u()
				n2 := r.u()
				n3 := r.u()
				p := t*t + 0.25*(n1+n2+n3-1.5)
				p = min(max(p, 0), 1)
				p = math.Floor(p*20) / 20
				predOK := r.u() >= 0.02
				execOK := r.u() >= 0.03
				grp.Rollouts[k] = Rollout{
					ID:        fmt.Sprintf("r%d", k),
					Predicted: Reward{Score: p, OK: predOK},
					Executed:  Reward{Score: t, OK: execOK},
				}
			}
			st.Groups[g] = grp
		}
		out[v] = st
	}
	return out
}

// TestReferenceMatchesNumpy replays the steps of the committed numpy run
// (bench/reference_bench.py --emit, window 300 so eviction happens) through
// ReferenceConfig and compares every row and the per-step weight and fit
// version. The numpy code is an independent implementation of DESIGN §2.
func TestReferenceMatchesNumpy(t *testing.T) {
	raw, err := os.ReadFile("testdata/reference_sim.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Seed   uint64 `json:"seed"`
		Window int    `json:"window"`
		Steps  []struct {
			Version      uint64       `json:"version"`
			AnchorWeight float64      `json:"anchor_weight"`
			Rows         [][3]float64 `json:"rows"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	cfg := ReferenceConfig()
	cfg.Window = doc.Window
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := simulate("run", "main", len(doc.Steps), doc.Seed)
	st := c.NewState("run", "main")
	const tol = 1e-9
	sawFit, sawFrozen := false, false
	for v, want := range doc.Steps {
		if st.FitVersion() != want.Version || !closeTo(st.AnchorWeight(), want.AnchorWeight, tol) {
			t.Fatalf("step %d: state version %d weight %v, numpy %d %v", v, st.FitVersion(), st.AnchorWeight(), want.Version, want.AnchorWeight)
		}
		rows, next, err := c.Correct(st, steps[v])
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(want.Rows) {
			t.Fatalf("step %d: %d rows, numpy %d", v, len(rows), len(want.Rows))
		}
		for i, row := range rows {
			w := want.Rows[i]
			if !closeTo(row.Calibrated, w[0], tol) || !closeTo(row.Advantage, w[1], tol) || !closeTo(row.Weight, w[2], tol) {
				t.Fatalf("step %d row %s/%s: (cal %v adv %v w %v), numpy (%v %v %v)",
					v, row.GroupID, row.RolloutID, row.Calibrated, row.Advantage, row.Weight, w[0], w[1], w[2])
			}
			if row.Mask != (w[2] != 0) {
				t.Fatalf("step %d row %s/%s: mask %v, numpy weight %v", v, row.GroupID, row.RolloutID, row.Mask, w[2])
			}
		}
		sawFit = sawFit || st.FitVersion() > 1
		sawFrozen = sawFrozen || st.frozen
		st = next
	}
	if !sawFit || !sawFrozen || st.TotalPairs() <= uint64(cfg.Window) {
		t.Fatalf("golden run too short to exercise refits (%v), freeze (%v) and eviction (%d pairs)", sawFit, sawFrozen, st.TotalPairs())
	}
}
