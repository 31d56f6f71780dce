package demo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// TestDebiasShiftOfTrainerRows: the shift the demo reads off the trainer's rows is the
// correction core's DebiasEffect of the step, whatever order the rows come in.
func TestDebiasShiftOfTrainerRows(t *testing.T) {
	cfg := correction.DefaultConfig()
	cfg.MinPairs = 8
	c, err := correction.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	st := c.NewState("run", "s")
	var want float64
	var rows []topics.AdvantageRow
	for v := int64(0); v < 6; v++ {
		step := correction.Step{Run: "run", Stream: "s", Step: v}
		for g := range 4 {
			grp := correction.Group{ID: topics.GroupID(v, g), Anchor: g == 0}
			for i := range 6 {
				x := rng.Float64()
				grp.Rollouts = append(grp.Rollouts, correction.Rollout{ID: topics.RolloutID(grp.ID, i),
					Predicted: correction.Reward{Score: math.Round(x*x*10) / 10, OK: true}, Executed: correction.Reward{Score: x, OK: true}})
			}
			step.Groups = append(step.Groups, grp)
		}
		out, next, err := c.Correct(st, step)
		if err != nil {
			t.Fatal(err)
		}
		st, want = next, c.DebiasEffect(out).MeanShift
		rows = rows[:0]
		for _, r := range out {
			src := topics.SourceWorldModel
			if r.Source == correction.SourceAnchor {
				src = topics.SourceAnchor
			}
			rows = append(rows, topics.AdvantageRow{RunID: r.Run, Stream: r.Stream, Step: r.Step, GroupID: r.GroupID,
				RolloutID: r.RolloutID, Source: src, Predicted: r.Predicted, PredictedOK: r.PredictedOK, Mask: r.Mask, Advantage: r.Advantage})
		}
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		if got := debiasShift(c, rows); got != want {
			t.Fatalf("step %d: shift %v from the trainer's rows, %v from the core", v, got, want)
		}
	}
	if want == 0 {
		t.Fatal("the map never moved an advantage; the test checks nothing")
	}
}
