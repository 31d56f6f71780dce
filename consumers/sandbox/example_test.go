package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"
)

func ExamplePolicy_Apply() {
	timeout := sandbox.Result{Status: sandbox.StatusTimeout, Reason: "wall-clock timeout after 10m0s"}
	for _, name := range []string{"missing", "zero"} {
		p, _ := sandbox.ParsePolicy(name)
		score, usable := p.Apply(timeout)
		fmt.Printf("%s: status=%s score=%v usable=%v\n", p, timeout.Status, score, usable)
	}
	// Output:
	// missing: status=timeout score=0 usable=false
	// zero: status=timeout score=0 usable=true
}

func ExamplePool() {
	task, _ := sandbox.NewBuiltinExecutor(func(ctx context.Context, job sandbox.Job) (float64, error) {
		return float64(len(job.Artifact)) / 10, nil
	}, sandbox.BuiltinConfig{Timeout: time.Second})
	pool, _ := sandbox.NewPool(task, 4)
	res, err := pool.Submit(context.Background(), sandbox.Job{RolloutID: "r1", Artifact: []byte("model")})
	fmt.Println(res.Status, res.Score, err)
	// Output:
	// ok 0.5 <nil>
}

func ExampleNewBuiltinExecutor() {
	slow, _ := sandbox.NewBuiltinExecutor(func(ctx context.Context, job sandbox.Job) (float64, error) {
		<-ctx.Done() // a well-behaved task stops when its budget is spent
		return 0, ctx.Err()
	}, sandbox.BuiltinConfig{Timeout: 10 * time.Millisecond})
	r := slow.Execute(context.Background(), sandbox.Job{})
	fmt.Println(r.Status, r.Reason)
	// Output:
	// timeout builtin task exceeded timeout 10ms
}
