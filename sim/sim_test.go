package sim

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wmrl/wmrl/task"
	"github.com/wmrl/wmrl/topics"
)

var update = flag.Bool("update", false, "rewrite golden files")

// tiny is a configuration small enough for unit tests (a few hundred executions per run).
func tiny() Config {
	c := DefaultConfig()
	c.Steps, c.Groups, c.GroupSize = 3, 4, 4
	return c
}

func evalSet(t *testing.T) *task.EvalSet {
	t.Helper()
	e, err := Eval(context.Background(), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func armNamed(t *testing.T, name string) Arm {
	t.Helper()
	as, err := ArmsByName([]string{name}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	return as[len(as)-1]
}

func TestRunAccounting(t *testing.T) {
	eval := evalSet(t)
	cfg := tiny()
	cfg.ExecOverhead = 10 * time.Millisecond
	for _, name := range []string{ArmRealGRPO, ArmPureWM, ArmNone, ArmWMRL, ArmReference} {
		t.Run(name, func(t *testing.T) {
			arm := armNamed(t, name)
			r, err := Run(context.Background(), cfg, arm, eval, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Steps) != cfg.Steps {
				t.Fatalf("%d steps, want %d", len(r.Steps), cfg.Steps)
			}
			wantExec, wantPairs := 0, 0
			for v, s := range r.Steps {
				anchors := 0
				for j := range cfg.Groups {
					if topics.IsAnchor(RunID(7), topics.GroupID(int64(v), j), arm.AnchorFraction) {
						anchors++
					}
				}
				if s.AnchorGroups != anchors {
					t.Errorf("step %d: %d anchor groups, want %d", v, s.AnchorGroups, anchors)
				}
				wantExec += anchors * cfg.GroupSize
				if s.Executions != wantExec {
					t.Errorf("step %d: %d executions, want %d", v, s.Executions, wantExec)
				}
				if s.ExecOverhead != time.Duration(wantExec)*cfg.ExecOverhead {
					t.Errorf("step %d: overhead %v for %d executions", v, s.ExecOverhead, wantExec)
				}
				if s.Predictions != (v+1)*cfg.Groups*cfg.GroupSize {
					t.Errorf("step %d: %d predictions", v, s.Predictions)
				}
				if (anchors == 0) != math.IsNaN(s.CalibrationMAE) {
					t.Errorf("step %d: calibration MAE %v with %d anchor groups", v, s.CalibrationMAE, anchors)
				}
				if !arm.Correction.Denoise && s.AnchorWeight != 1 {
					t.Errorf("step %d: anchor weight %v with denoise off", v, s.AnchorWeight)
				}
				if s.Score < 0 || s.Score > 1 {
					t.Errorf("step %d: score %v", v, s.Score)
				}
				wantPairs = wantExec
			}
			if len(r.Pairs) != wantPairs {
				t.Errorf("%d pairs recorded, want %d", len(r.Pairs), wantPairs)
			}
			if name == ArmRealGRPO && wantExec != cfg.Steps*cfg.Groups*cfg.GroupSize {
				t.Errorf("real-GRPO executed %d, want every rollout", wantExec)
			}
			if name == ArmPureWM && wantExec != 0 {
				t.Errorf("pure-WM executed %d", wantExec)
			}
		})
	}
}

// The policy must actually learn from the rewards: a few steps of real-GRPO raise the expected
// score in most seeds (a sign error or dropped update would not).
func TestRealGRPOLearns(t *testing.T) {
	eval := evalSet(t)
	cfg := tiny()
	cfg.Steps, cfg.Groups, cfg.GroupSize = 6, 4, 8
	better := 0
	for seed := range int64(3) {
		r, err := Run(context.Background(), cfg, armNamed(t, ArmRealGRPO), eval, seed, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.FinalScore() > r.InitialScore {
			better++
		}
	}
	if better < 2 {
		t.Fatalf("real-GRPO improved the score in only %d of 3 seeds", better)
	}
}

func TestRunDeterministic(t *testing.T) {
	eval := evalSet(t)
	arm := armNamed(t, ArmWMRL)
	var observed []StepRecord
	a, err := Run(context.Background(), tiny(), arm, eval, 3, func(s StepRecord) { observed = append(observed, s) })
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), tiny(), arm, eval, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(observed) != len(a.Steps) {
		t.Fatalf("observer saw %d steps, result has %d", len(observed), len(a.Steps))
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Score != y.Score || x.Executions != y.Executions || x.AnchorWeight != y.AnchorWeight || x.Entropy != y.Entropy {
			t.Fatalf("step %d differs between identical runs: %+v vs %+v", i, x, y)
		}
	}
	if a.State.Digest() != b.State.Digest() {
		t.Fatal("final calibration states differ")
	}
	c, err := Run(context.Background(), tiny(), arm, eval, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.FinalScore() == a.FinalScore() && c.State.Digest() == a.State.Digest() {
		t.Fatal("different seeds gave identical runs")
	}
}

func TestSweepMatchesRuns(t *testing.T) {
	eval := evalSet(t)
	arms, err := ArmsByName([]string{ArmPureWM, ArmOD}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Config: tiny(), Arms: arms, Seeds: []int64{1, 2}, Workers: 2}
	progress := 0
	res, err := sw.Run(context.Background(), eval, func(Progress) { progress++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 || progress != 6 {
		t.Fatalf("%d results, %d progress calls, want 6", len(res), progress)
	}
	for i, r := range res {
		arm, seed := arms[i/2], sw.Seeds[i%2]
		if r.Arm != arm.Name || r.Seed != seed {
			t.Fatalf("result %d is %s/%d, want %s/%d", i, r.Arm, r.Seed, arm.Name, seed)
		}
		one, err := Run(context.Background(), tiny(), arm, eval, seed, nil)
		if err != nil {
			t.Fatal(err)
		}
		if one.FinalScore() != r.FinalScore() {
			t.Errorf("%s/%d: sweep %v, single run %v", arm.Name, seed, r.FinalScore(), one.FinalScore())
		}
	}
}

func TestSweepCancel(t *testing.T) {
	eval := evalSet(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Sweep{Config: tiny(), Arms: Arms(0.25), Seeds: []int64{1}}.Run(ctx, eval, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestConfigErrors(t *testing.T) {
	bad := func(f func(*Config)) Config { c := tiny(); f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"steps", bad(func(c *Config) { c.Steps = 0 })},
		{"groups", bad(func(c *Config) { c.Groups = 0 })},
		{"group size", bad(func(c *Config) { c.GroupSize = 1 })},
		{"lr", bad(func(c *Config) { c.LR = math.NaN() })},
		{"overhead", bad(func(c *Config) { c.ExecOverhead = -1 })},
		{"world model", bad(func(c *Config) { c.WorldModel.Subsample = 1 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := Run(context.Background(), tiny(), Arms(0.25)[0], nil, 1, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil eval: err = %v", err)
	}
	if _, err := ArmsByName([]string{"nope"}, 0.25); !errors.Is(err, ErrUnknownArm) {
		t.Fatalf("unknown arm: err = %v", err)
	}
}

func TestArmsByNameAddsRealGRPO(t *testing.T) {
	as, err := ArmsByName([]string{"WMRL", "od", "wmrl"}, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range as {
		names = append(names, a.Name)
	}
	if len(names) != 3 || names[0] != ArmRealGRPO || names[1] != ArmWMRL || names[2] != ArmOD {
		t.Fatalf("arms %v", names)
	}
	if as[1].AnchorFraction != 0.2 || as[0].AnchorFraction != 1 {
		t.Fatalf("fractions %v %v", as[0].AnchorFraction, as[1].AnchorFraction)
	}
}

func TestEstimate(t *testing.T) {
	for _, tc := range []struct {
		xs       []float64
		mean, ci float64
	}{
		{nil, math.NaN(), math.NaN()},
		{[]float64{2}, 2, math.NaN()},
		// t(0.975, 1) = 12.7062; sd = √2, so CI = 12.7062 · √2/√2.
		{[]float64{1, 3}, 2, 12.7062047},
		// t(0.975, 4) = 2.7764451; sd = √2.5.
		{[]float64{1, 2, 3, 4, 5}, 3, 2.7764451 * math.Sqrt(2.5) / math.Sqrt(5)},
	} {
		e := NewEstimate(tc.xs)
		same := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-6 }
		if !same(e.Mean, tc.mean) || !same(e.CI, tc.ci) || e.N != len(tc.xs) {
			t.Errorf("%v: got %+v, want mean %v ci %v", tc.xs, e, tc.mean, tc.ci)
		}
	}
}

// synthetic builds a result whose score curve and execution counts are given.
func synthetic(arm string, seed int64, perStep int, scores ...float64) Result {
	r := Result{Arm: arm, Seed: seed, InitialScore: 0.2}
	for i, s := range scores {
		r.Steps = append(r.Steps, StepRecord{Step: i, Score: s, Executions: (i + 1) * perStep,
			ExecCompute: time.Duration(i+1) * time.Second, CalibrationMAE: math.NaN(), RawMAE: math.NaN(), AnchorWeight: 1})
	}
	return r
}

func syntheticResults() []Result {
	return []Result{
		synthetic(ArmRealGRPO, 1, 64, 0.3, 0.5, 0.6, 0.7),  // target 0.63: reached at step 3 (256)
		synthetic(ArmRealGRPO, 2, 64, 0.4, 0.5, 0.55, 0.6), // target 0.54: step 2 (192)
		synthetic(ArmWMRL, 1, 16, 0.3, 0.64, 0.7, 0.72),    // step 1 (32): 8x
		synthetic(ArmWMRL, 2, 16, 0.3, 0.4, 0.5, 0.56),     // step 3 (64): 3x
		synthetic(ArmPureWM, 1, 0, 0.5, 0.65, 0.6, 0.6),    // reached with 0 executions
		synthetic(ArmPureWM, 2, 0, 0.3, 0.3, 0.3, 0.3),     // never
	}
}

func TestSummarize(t *testing.T) {
	sums := Summarize(syntheticResults(), 0.9)
	if len(sums) != 3 {
		t.Fatalf("%d summaries", len(sums))
	}
	real, wmrl, pure := sums[0], sums[1], sums[2]
	if real.Reached != 2 || real.ExecutionsToTarget.Mean != 224 || real.Speedup.Mean != 1 {
		t.Errorf("real: %+v", real)
	}
	if wmrl.Reached != 2 || wmrl.ExecutionsToTarget.Mean != 48 || wmrl.Speedup.Mean != 5.5 {
		t.Errorf("wmrl: reached %d execs %v speedup %v", wmrl.Reached, wmrl.ExecutionsToTarget, wmrl.Speedup)
	}
	if math.Abs(wmrl.FinalDelta.Mean-(-0.01)) > 1e-12 {
		t.Errorf("wmrl final delta %v", wmrl.FinalDelta.Mean)
	}
	if pure.Reached != 1 || pure.Speedup.N != 0 || pure.ExecutionsToTarget.Mean != 0 {
		t.Errorf("pure: %+v", pure)
	}
	if got := FirstReach(syntheticResults()[0], 0.65); !got.Reached || got.Step != 3 || got.Executions != 256 || got.ExecSeconds != 4 {
		t.Errorf("FirstReach: %+v", got)
	}
	if FirstReach(syntheticResults()[0], 0.8).Reached {
		t.Error("FirstReach reached an unreachable target")
	}
}

func TestOutputGolden(t *testing.T) {
	res := syntheticResults()
	var buf bytes.Buffer
	if err := WriteTable(&buf, Summarize(res, 0.9), 0.9); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("--- summary.csv\n")
	if err := WriteSummaryCSV(&buf, Summarize(res, 0.9)); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("--- steps.csv\n")
	if err := WriteStepsCSV(&buf, res[:2]); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "output.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("output differs from %s (rerun with -update after checking):\n%s", golden, buf.String())
	}
}

func TestTrainingProblemsAreDisjointFromEval(t *testing.T) {
	seen := map[int64]bool{}
	for _, p := range EvalProblems(4) {
		if p.Seed() >= 0 {
			t.Fatalf("eval problem %s has a non-negative seed", p)
		}
		seen[p.Seed()] = true
	}
	kinds := map[task.Kind]int{}
	for seed := range int64(3) {
		for v := range 10 {
			for j := range 8 {
				p := TrainingProblem(seed, v, j)
				if p.Seed() < 0 || seen[p.Seed()] {
					t.Fatalf("training problem %s collides or is negative", p)
				}
				seen[p.Seed()] = true
				kinds[p.Kind()]++
			}
		}
	}
	if kinds[task.Regression] < 60 || kinds[task.Classification] < 60 {
		t.Fatalf("kinds unbalanced: %v", kinds)
	}
}

// One seed has no confidence intervals: summary.csv leaves the ci95 columns out instead of
// writing NaN, and keeps them (with real numbers) for two seeds.
func TestSummaryCSVCIColumns(t *testing.T) {
	var one []Result
	for _, r := range syntheticResults() {
		if r.Seed == 1 {
			one = append(one, r)
		}
	}
	for _, tc := range []struct {
		name    string
		results []Result
		wantCI  bool
	}{{"one seed", one, false}, {"two seeds", syntheticResults(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSummaryCSV(&buf, Summarize(tc.results, 0.9)); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if strings.Contains(out, "NaN") {
				t.Errorf("summary.csv has NaN:\n%s", out)
			}
			if got := strings.Contains(strings.SplitN(out, "\n", 2)[0], "_ci95"); got != tc.wantCI {
				t.Errorf("ci95 columns present %v, want %v:\n%s", got, tc.wantCI, out)
			}
		})
	}
}

// The terminal summary stays within 100 columns, even with CIs, and defines every column it
// prints.
func TestTableWidthAndLegend(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, Summarize(syntheticResults(), 0.9), 0.9); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	legend := TableLegend(0.9)
	for _, col := range strings.Split(lines[0], "  ") {
		col = strings.TrimSpace(col)
		if col == "" || col == "arm" {
			continue
		}
		if !strings.Contains(legend, "  "+col+" ") {
			t.Errorf("column %q is not defined under the table", col)
		}
	}
}
