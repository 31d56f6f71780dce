package correction

import (
	"fmt"
	"math"
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
