package correction

import (
	"bytes"
	"fmt"
	"testing"
)

// staleStep is one step with an anchor group and a world-model group of four rollouts each;
// stale[g][i] marks rollout i of group g (0 anchor, 1 world model) stale, and missing[g][i]
// drops its reward instead.
func staleStep(stale, missing [2][4]bool) Step {
	groups := []Group{{ID: "a", Anchor: true}, {ID: "w"}}
	for g := range groups {
		for i := range 4 {
			r := Rollout{
				ID:        fmt.Sprint("r", i),
				Predicted: Reward{0.2 + 0.15*float64(i) + 0.05*float64(g), true},
				Stale:     stale[g][i],
			}
			if groups[g].Anchor {
				r.Executed = Reward{0.1 + 0.2*float64(i), true}
			}
			if missing[g][i] {
				r.Predicted.OK = groups[g].Anchor // an anchor row loses its executed score
				r.Executed.OK = false
			}
			groups[g].Rollouts = append(groups[g].Rollouts, r)
		}
	}
	return Step{Run: "run", Stream: "s", Step: 0, Groups: groups}
}

func TestStaleRolloutsMaskedLikeMissingRewards(t *testing.T) {
	tests := []struct {
		name  string
		stale [2][4]bool
	}{
		{"none", [2][4]bool{}},
		{"one world-model rollout", [2][4]bool{1: {false, true, false, false}}},
		{"one anchor rollout", [2][4]bool{0: {true, false, false, false}}},
		{"three of a group: fewer than two graded", [2][4]bool{1: {true, true, true, false}}},
		{"everything", [2][4]bool{{true, true, true, true}, {true, true, true, true}}},
	}
	modes := map[string]Config{"default": DefaultConfig(), "reference": ReferenceConfig()}
	for mname, cfg := range modes {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(mname+"/"+tt.name, func(t *testing.T) {
				rows, st, err := c.Correct(c.NewState("run", "s"), staleStep(tt.stale, [2][4]bool{}))
				if err != nil {
					t.Fatal(err)
				}
				// The same step with the stale rollouts' rewards missing instead.
				want, _, err := c.Correct(c.NewState("run", "s"), staleStep([2][4]bool{}, tt.stale))
				if err != nil {
					t.Fatal(err)
				}
				// And with no staleness at all: the state after the step must not depend on it.
				_, fresh, err := c.Correct(c.NewState("run", "s"), staleStep([2][4]bool{}, [2][4]bool{}))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(st.Encode(), fresh.Encode()) {
					t.Error("stale rollouts changed the sealed state (window, fit or noise estimate)")
				}
				for k, r := range rows {
					g := map[string]int{"a": 0, "w": 1}[r.GroupID]
					var i int
					fmt.Sscanf(r.RolloutID, "r%d", &i)
					isStale := tt.stale[g][i]
					w := want[k]
					if r.Stale != isStale {
						t.Errorf("%s/%s: Stale %v, want %v", r.GroupID, r.RolloutID, r.Stale, isStale)
					}
					if r.Mask != w.Mask || r.Advantage != w.Advantage || r.Used != w.Used || r.Weight != w.Weight {
						t.Errorf("%s/%s: mask/advantage/used/weight %v/%v/%v/%v, as a missing reward %v/%v/%v/%v",
							r.GroupID, r.RolloutID, r.Mask, r.Advantage, r.Used, r.Weight, w.Mask, w.Advantage, w.Used, w.Weight)
					}
					if isStale && (r.Mask || !r.PredictedOK || r.Predicted == 0 || r.Calibrated == 0 || (g == 0 && (!r.ExecutedOK || r.Executed == 0))) {
						t.Errorf("%s/%s: a stale row keeps its scores and is masked: %+v", r.GroupID, r.RolloutID, r)
					}
				}
			})
		}
	}
}
