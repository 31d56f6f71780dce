package producers_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/wmrl/wmrl/producers"
)

func ExampleNewJSONL() {
	in := strings.NewReader(`{"step": 0, "group_id": "q1", "prompt": "fit a model", "artifact": "ridge"}
{"step": 0, "group_id": "q1", "prompt": "fit a model", "artifact": "gbm"}
{"step": 1, "group_id": "q1", "prompt": "fit a model", "artifact": "mlp"}
`)
	b, _ := producers.NewJSONL(in, producers.JSONLConfig{RunID: "run-1"})
	for {
		step, err := b.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		g := step.Groups[0]
		fmt.Println(step.Step, g.GroupID, len(g.Rollouts))
	}
	// Output:
	// 0 0-q1 2
	// 1 1-q1 1
	// EOF
}

// policy is a stand-in for the demo's task policy.
type policy struct{}

func (policy) SampleStep(_ context.Context, step int64) ([]producers.GroupSpec, error) {
	g := producers.GroupSpec{Prompt: "task"}
	for i := range 4 {
		g.Rollouts = append(g.Rollouts, producers.RolloutSpec{Artifact: fmt.Appendf(nil, "candidate %d.%d", step, i)})
	}
	return []producers.GroupSpec{g}, nil
}

func ExampleNewBuiltin() {
	b, _ := producers.NewBuiltin(policy{}, 0, 2)
	for {
		step, err := b.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(step.Step, string(step.Groups[0].Rollouts[3].Artifact))
	}
	// Output:
	// 0 candidate 0.3
	// 1 candidate 1.3
	// EOF
}
