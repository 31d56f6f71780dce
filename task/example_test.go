package task_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/wmrl/wmrl/task"
)

func ExampleExecute() {
	p := task.NewProblem(42, task.Regression)
	s := task.Solution{Model: task.Ridge, Features: task.Poly2, Reg: 3}
	score, err := task.Execute(context.Background(), p, s)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s on %s: %.3f\n", s, p, score)
	// Output: ridge(poly2, reg=0.1) on regression/42: 0.667
}

func ExampleWorldModel_Predict() {
	p := task.NewProblem(42, task.Regression)
	wm := task.NewWorldModel(task.WorldModelConfig{}) // defaults
	for _, s := range []task.Solution{
		{Model: task.Ridge, Features: task.Poly2, Reg: 3},
		{Model: task.KNN, Features: task.Standardize, Capacity: 0}, // 1-NN overfits
	} {
		pred, _ := wm.Predict(context.Background(), p.Train(), s)
		real, _ := task.Execute(context.Background(), p, s)
		fmt.Printf("%-25s predicted %.3f real %.3f\n", s, pred, real)
	}
	// Output:
	// ridge(poly2, reg=0.1)     predicted 0.571 real 0.667
	// knn(standardize, k=1)     predicted 0.592 real 0.000
}

func ExampleDecodeSolution() {
	s, err := task.DecodeSolution([]byte(`{"model":"gd","features":"poly2","reg":0.01,"lr":0.1,"iters":100,"capacity":0}`))
	fmt.Println(s, err)
	_, err = task.DecodeSolution([]byte(`{"model":"gd","features":"poly2","reg":0.02,"lr":0.1,"iters":100,"capacity":0}`))
	fmt.Println(err)
	// Output:
	// gd(poly2, reg=0.01, lr=0.1, iters=100) <nil>
	// task: invalid solution: field "reg": 0.02 not one of [0 0.001 0.01 0.1 1]
}

func ExampleSolution_Encode() {
	s := task.Solution{Model: task.KNN, Features: task.Standardize, Capacity: 2}
	fmt.Println(string(s.Encode()))
	// Output: {"model":"knn","features":"standardize","reg":0,"lr":0.01,"iters":10,"capacity":2}
}

// One GRPO step on one group: sample, score, normalize, update.
func ExamplePolicy_Update() {
	ctx := context.Background()
	p := task.NewProblem(1, task.Regression)
	pol := task.NewPolicy()
	rng := rand.New(rand.NewPCG(1, 2))
	group, _ := pol.Sample(rng, 8)
	scores := make([]float64, len(group))
	for i, s := range group {
		scores[i], _ = task.Execute(ctx, p, s)
	}
	mean, std := 0.0, 0.0
	for _, v := range scores {
		mean += v / 8
	}
	for _, v := range scores {
		std += (v - mean) * (v - mean) / 8
	}
	adv := make([]float64, 8)
	weights := make([]float64, 8)
	for i, v := range scores {
		adv[i] = (v - mean) / (math.Sqrt(std) + 1e-4)
		weights[i] = 1
	}
	before := pol.Entropy()
	if err := pol.Update(group, adv, weights, nil, 0.5); err != nil {
		panic(err)
	}
	fmt.Printf("entropy %.3f -> %.3f\n", before, pol.Entropy())
	// Output: entropy 8.764 -> 8.741
}
