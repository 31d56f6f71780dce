package demo

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/topics"
)

// testDeadline bounds a pipeline test. It is generous because CI runs `go test -race ./...` on
// a loaded 2-core machine, where a pipeline run takes many times its idle wall time; a real hang
// still fails, with the pipeline's own error.
const testDeadline = 5 * time.Minute

// testContext is cancelled after testDeadline, or a little before go test's -timeout, so that a
// hang reports ErrStalled or a deadline instead of the test binary's panic dump.
func testContext(t *testing.T) context.Context {
	deadline := time.Now().Add(testDeadline)
	if td, ok := t.Deadline(); ok && td.Add(-15*time.Second).Before(deadline) {
		deadline = td.Add(-15 * time.Second)
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func tinyConfig() Config {
	c := Config{Sim: sim.DefaultConfig(), AnchorFraction: 0.5, Seed: 3, EvalProblems: 1, StallTimeout: 2 * time.Minute}
	c.Sim.Steps, c.Sim.Groups, c.Sim.GroupSize = 4, 3, 4
	return c
}

// The pipeline is the simulation with Kafka and Redis in between: every arm must reproduce the
// in-process loop exactly (scores, executions, calibration state digest), which shows that no
// stage drops, duplicates, reorders or alters a record on the way.
func TestEmbeddedPipelineMatchesSimulation(t *testing.T) {
	ctx := testContext(t)
	cfg := tinyConfig()
	// wmrl-gate: the trust gate (correct --trust-gate) decides each step as the simulation does.
	cfg.Arms = sim.WithTrustGate(Arms(cfg.AnchorFraction), []bool{false, true})
	steps := map[string]int{}
	cfg.OnStep = func(arm string, rec sim.StepRecord) { steps[arm]++ }
	out, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Embedded || len(out.Results) != 4 {
		t.Fatalf("embedded %v, %d results", out.Embedded, len(out.Results))
	}
	eval, err := sim.Eval(ctx, cfg.EvalProblems, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, arm := range cfg.Arms {
		got := out.Results[i]
		if steps[arm.Name] != cfg.Sim.Steps {
			t.Errorf("%s: progress saw %d steps", arm.Name, steps[arm.Name])
		}
		want, err := sim.Run(ctx, cfg.Sim, arm, eval, cfg.Seed, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Steps) != len(want.Steps) {
			t.Fatalf("%s: %d steps, sim %d", arm.Name, len(got.Steps), len(want.Steps))
		}
		for v := range want.Steps {
			g, w := got.Steps[v], want.Steps[v]
			if g.Score != w.Score || g.Executions != w.Executions || g.Predictions != w.Predictions ||
				g.AnchorWeight != w.AnchorWeight || g.AnchorGroups != w.AnchorGroups || g.FitVersion != w.FitVersion || g.Pairs != w.Pairs ||
				g.Gate != w.Gate || g.GateOn != w.GateOn {
				t.Fatalf("%s step %d: pipeline %+v\nsim %+v", arm.Name, v, g, w)
			}
		}
		if got.State.Digest() != want.State.Digest() {
			t.Errorf("%s: calibration state digest differs from the simulation's", arm.Name)
		}
		if len(got.Pairs) != len(want.Pairs) {
			t.Errorf("%s: %d anchor pairs, sim %d", arm.Name, len(got.Pairs), len(want.Pairs))
		}
	}
	if out.FinalLine == "" {
		t.Fatal("no final line")
	}
	t.Log(out.FinalLine, "elapsed", out.Elapsed)
}

// liveArmGoroutines counts goroutines still inside an arm's pipeline.
func liveArmGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "demo.(*armRun).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A topic-creation failure of a later arm must return before any arm started: otherwise the
// started arms would outlive Run and the embedded cluster and Redis it closes on return. Kafka
// rejects topics differing only in '.' vs '_', so arm "x_y" fails after arms 0 and "x.y" created
// theirs.
func TestRunTopicFailureStartsNoArm(t *testing.T) {
	ctx := testContext(t)
	cfg := tinyConfig()
	cfg.Arms = Arms(cfg.AnchorFraction)
	cfg.Arms[1].Name, cfg.Arms[2].Name = "x.y", "x_y"
	var steps atomic.Int64
	cfg.OnStep = func(string, sim.StepRecord) { steps.Add(1) }
	_, err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "create topics for x_y") {
		t.Fatalf("err %v, want the x_y arm's topic creation to fail", err)
	}
	if n := liveArmGoroutines(); n != 0 {
		t.Errorf("%d arm goroutines still running after Run returned", n)
	}
	if n := steps.Load(); n != 0 {
		t.Errorf("%d steps trained although Run failed before starting", n)
	}
}

func TestRunRejectsBadArms(t *testing.T) {
	arms := Arms(0.5)
	for name, as := range map[string][]sim.Arm{
		"repeated": {arms[0], arms[1], arms[0]},
		"empty":    {arms[0], {Name: "", AnchorFraction: 0.5, Correction: arms[2].Correction}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Arms = as
			if _, err := Run(t.Context(), cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v, want ErrConfig", err)
			}
		})
	}
}

// The demo recovers each group's problem from its id, so it must accept exactly the generator's
// default ids of the step and nothing else.
func TestProblemFromGroupID(t *testing.T) {
	a := &armRun{cfg: tinyConfig()} // 3 groups per step
	for _, tc := range []struct {
		step int64
		id   string
		ok   bool
	}{
		{2, topics.GroupID(2, 0), true},
		{2, topics.GroupID(2, 2), true},
		{2, topics.GroupID(2, 3), false}, // beyond the step's groups
		{2, topics.GroupID(1, 0), false}, // another step
		{2, "02-1", false},
		{2, "2-+1", false},
		{2, "2-1-0", false},
		{2, "prompt-7", false},
	} {
		p, err := a.problem(tc.step, tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("problem(%d, %q): err %v, want ok=%v", tc.step, tc.id, err, tc.ok)
			continue
		}
		if tc.ok {
			_, j, _ := topics.ParseGroupID(tc.id)
			if want := sim.TrainingProblem(a.cfg.Seed, int(tc.step), j); p.String() != want.String() {
				t.Errorf("problem(%d, %q) is not sim's training problem", tc.step, tc.id)
			}
		}
	}
}
