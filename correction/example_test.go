package correction_test

import (
	"fmt"

	"github.com/wmrl/wmrl/correction"
)

func ExampleFitIsotonic() {
	// scikit-learn's documentation example: the violators 5,3,1,2 pool to
	// their mean 2.75, the tail pools to 7.33…
	x := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	y := []float64{5, 3, 1, 2, 8, 10, 7, 9, 6, 4}
	f, err := correction.FitIsotonic(x, y, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%.4f %.4f %.4f %.4f\n", f.Predict(1), f.Predict(3.5), f.Predict(8), f.Predict(100))
	bx, by := f.Breakpoints()
	fmt.Println(bx, len(by))
	// Output:
	// 2.7500 5.0417 7.3333 7.3333
	// [0 3 4 9] 4
}

func ExampleAdvantages() {
	rewards := []correction.Reward{{Score: 0.2, OK: true}, {OK: false}, {Score: 0.6, OK: true}}
	adv, mask := correction.Advantages(rewards, correction.DrGRPO, 0, 0)
	fmt.Printf("%.2f %v\n", adv, mask)
	// Output: [-0.20 0.00 0.20] [true false true]
}

func ExampleCorrector_Correct() {
	c, err := correction.New(correction.DefaultConfig())
	if err != nil {
		panic(err)
	}
	state := c.NewState("run-1", "main")
	step := correction.Step{Run: "run-1", Stream: "main", Step: 0, Groups: []correction.Group{
		{ID: "task-a", Anchor: true, Rollouts: []correction.Rollout{
			{ID: "a1", Predicted: correction.Reward{Score: 0.9, OK: true}, Executed: correction.Reward{Score: 0.5, OK: true}},
			{ID: "a0", Predicted: correction.Reward{Score: 0.4, OK: true}, Executed: correction.Reward{Score: 0.1, OK: true}},
		}},
		{ID: "task-b", Rollouts: []correction.Rollout{
			{ID: "b0", Predicted: correction.Reward{Score: 0.3, OK: true}},
			{ID: "b1", Predicted: correction.Reward{OK: false}}, // world model failed: masked
			{ID: "b2", Predicted: correction.Reward{Score: 0.7, OK: true}},
		}},
	}}
	rows, next, err := c.Correct(state, step)
	if err != nil {
		panic(err)
	}
	for _, r := range rows {
		fmt.Printf("%s/%s %-11s used=%.1f adv=%+.3f w=%.0f mask=%v\n", r.GroupID, r.RolloutID, r.Source, r.Used, r.Advantage, r.Weight, r.Mask)
	}
	fmt.Println("sealed", next.SealedStep(), "pairs", next.Pairs(), "fit version", next.FitVersion())
	// Output:
	// task-a/a0 anchor      used=0.1 adv=-1.000 w=1 mask=true
	// task-a/a1 anchor      used=0.5 adv=+1.000 w=1 mask=true
	// task-b/b0 world_model used=0.3 adv=-1.000 w=1 mask=true
	// task-b/b1 world_model used=0.0 adv=+0.000 w=0 mask=false
	// task-b/b2 world_model used=0.7 adv=+1.000 w=1 mask=true
	// sealed 0 pairs 2 fit version 0
}

func ExampleDecodeState() {
	c, err := correction.New(correction.ReferenceConfig())
	if err != nil {
		panic(err)
	}
	s := c.NewState("run-1", "main")
	b := s.Encode()
	d, err := correction.DecodeState(b)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Run(), d.SealedStep(), d.Digest() == s.Digest())
	// Output: run-1 -1 true
}

func ExampleCorrector_DebiasEffect() {
	cfg := correction.DefaultConfig()
	cfg.Advantage = correction.DrGRPO
	c, err := correction.New(cfg)
	if err != nil {
		panic(err)
	}
	// One world-model group as a map left it: the two low predictions were
	// mapped to one value (a flat stretch), so their tie is new.
	wm := func(id string, predicted, adv float64) correction.Row {
		return correction.Row{GroupID: "g", RolloutID: id, Source: correction.SourceWorldModel,
			Predicted: predicted, PredictedOK: true, Mask: true, Advantage: adv}
	}
	e := c.DebiasEffect([]correction.Row{wm("r0", 0.2, -0.1), wm("r1", 0.4, -0.1), wm("r2", 0.6, 0.2)})
	fmt.Printf("rows=%d groups=%d reordered=%d (%.0f%%) flattened=%d shift=%.4f\n",
		e.Rows, e.Groups, e.Reordered, 100*e.ReorderedShare(), e.Flattened, e.MeanShift)
	// Output: rows=3 groups=1 reordered=1 (100%) flattened=0 shift=0.0667
}
