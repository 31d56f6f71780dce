package demo

import (
	"context"
	"testing"
	"time"

	"github.com/wmrl/wmrl/sim"
)

func tinyConfig() Config {
	c := Config{Sim: sim.DefaultConfig(), AnchorFraction: 0.5, Seed: 3, EvalProblems: 1, StallTimeout: time.Minute}
	c.Sim.Steps, c.Sim.Groups, c.Sim.GroupSize = 4, 3, 4
	return c
}

// The pipeline is the simulation with Kafka and Redis in between: every arm must reproduce the
// in-process loop exactly (scores, executions, calibration state digest), which shows that no
// stage drops, duplicates, reorders or alters a record on the way.
func TestEmbeddedPipelineMatchesSimulation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig()
	steps := map[string]int{}
	cfg.OnStep = func(arm string, rec sim.StepRecord) { steps[arm]++ }
	out, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Embedded || len(out.Results) != 3 {
		t.Fatalf("embedded %v, %d results", out.Embedded, len(out.Results))
	}
	eval, err := sim.Eval(ctx, cfg.EvalProblems, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, arm := range Arms(cfg.AnchorFraction) {
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
				g.AnchorWeight != w.AnchorWeight || g.AnchorGroups != w.AnchorGroups || g.FitVersion != w.FitVersion || g.Pairs != w.Pairs {
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
