package sim

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/wmrl/wmrl/task"
)

// DefaultTargetFraction is the share of real-GRPO's final score (same seed) that defines the
// target of compute-to-target.
const DefaultTargetFraction = 0.9

// Sweep is a grid of arms × seeds over one task loop.
type Sweep struct {
	Config Config
	Arms   []Arm
	Seeds  []int64
	// Workers bounds the concurrent runs; 0 means GOMAXPROCS.
	Workers int
}

// Progress is reported after every finished run.
type Progress struct {
	Done, Total int
	Result      Result
}

var (
	evalMu    sync.Mutex
	evalCache = map[int]*task.EvalSet{}
)

// Eval returns the eval set over EvalProblems(n), computed once per process: building it executes
// every effective solution on every problem (≈ 756 × n executions, seconds per problem).
func Eval(ctx context.Context, n, workers int) (*task.EvalSet, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: eval problems %d, want >= 1", ErrConfig, n)
	}
	evalMu.Lock()
	defer evalMu.Unlock()
	if e, ok := evalCache[n]; ok {
		return e, nil
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	e, err := task.NewEvalSet(ctx, EvalProblems(n), workers)
	if err != nil {
		return nil, fmt.Errorf("sim: eval set: %w", err)
	}
	evalCache[n] = e
	return e, nil
}

// Run executes every arm × seed on a worker pool bounded by Workers and returns the results
// ordered by arm (as given), then seed. Runs that execute more (higher anchor fraction) start
// first so the pool drains evenly. progress, if not nil, is called from one goroutine at a time.
func (s Sweep) Run(ctx context.Context, eval *task.EvalSet, progress func(Progress)) ([]Result, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, err
	}
	if len(s.Arms) == 0 || len(s.Seeds) == 0 {
		return nil, fmt.Errorf("%w: need at least one arm and one seed", ErrConfig)
	}
	type job struct{ arm, seed int }
	var jobs []job
	for a := range s.Arms {
		for i := range s.Seeds {
			jobs = append(jobs, job{a, i})
		}
	}
	sort.SliceStable(jobs, func(i, j int) bool {
		return s.Arms[jobs[i].arm].AnchorFraction > s.Arms[jobs[j].arm].AnchorFraction
	})
	workers := s.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make([]Result, len(s.Arms)*len(s.Seeds))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var mu sync.Mutex // progress is called from one goroutine at a time
	done := 0
	for _, j := range jobs {
		g.Go(func() error {
			r, err := Run(ctx, s.Config, s.Arms[j.arm], eval, s.Seeds[j.seed], nil)
			if err != nil {
				return fmt.Errorf("arm %s seed %d: %w", s.Arms[j.arm].Name, s.Seeds[j.seed], err)
			}
			results[j.arm*len(s.Seeds)+j.seed] = r
			mu.Lock()
			defer mu.Unlock()
			done++
			if progress != nil {
				progress(Progress{Done: done, Total: len(jobs), Result: r})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return results, nil
}

// Estimate is a sample mean with the half-width of its two-sided 95% confidence interval
// (Student t with N−1 degrees of freedom); CI is NaN for N < 2 and Mean NaN for N = 0.
type Estimate struct {
	Mean, CI float64
	N        int
}

// NewEstimate summarises xs.
func NewEstimate(xs []float64) Estimate {
	e := Estimate{Mean: math.NaN(), CI: math.NaN(), N: len(xs)}
	if len(xs) == 0 {
		return e
	}
	mean, sd := stat.MeanStdDev(xs, nil)
	e.Mean = mean
	if len(xs) > 1 {
		t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(xs) - 1)}.Quantile(0.975)
		e.CI = t * sd / math.Sqrt(float64(len(xs)))
	}
	return e
}

// Format formats "mean ± ci" with the given number of decimals.
func (e Estimate) Format(decimals int) string {
	switch {
	case e.N == 0:
		return "—"
	case math.IsNaN(e.CI):
		return fmt.Sprintf("%.*f", decimals, e.Mean)
	}
	return fmt.Sprintf("%.*f ± %.*f", decimals, e.Mean, decimals, e.CI)
}

// ToTarget is where a run first reached its target.
type ToTarget struct {
	Reached      bool
	Step         int
	Executions   int
	ExecSeconds  float64 // measured execution wall time
	TotalSeconds float64 // execution wall time + overhead + world-model wall time
}

// FirstReach finds the first step whose score is at least target.
func FirstReach(r Result, target float64) ToTarget {
	for _, s := range r.Steps {
		if s.Score >= target {
			return ToTarget{
				Reached: true, Step: s.Step, Executions: s.Executions,
				ExecSeconds:  s.ExecCompute.Seconds(),
				TotalSeconds: (s.ExecCompute + s.ExecOverhead + s.WMCompute).Seconds(),
			}
		}
	}
	return ToTarget{}
}

// ArmSummary aggregates one arm over seeds.
type ArmSummary struct {
	Arm     string
	Seeds   int
	Reached int // seeds in which the arm reached the target
	// Final is the final score; Initial the untrained policy's (equal across arms of a seed).
	Final, Initial Estimate
	// ExecutionsToTarget and the others are over the seeds that reached the target.
	ExecutionsToTarget   Estimate
	ExecSecondsToTarget  Estimate
	TotalSecondsToTarget Estimate
	StepsToTarget        Estimate
	// Speedup is real-GRPO's executions-to-target over this arm's, per seed in which both
	// reached it and this arm executed at least once.
	Speedup Estimate
	// Executions is the total number of executions of the whole run.
	Executions Estimate
	// FinalDelta is this arm's final score minus real-GRPO's, per seed.
	FinalDelta Estimate
	// GateClosed is the fraction of the run's steps in which the trust gate was closed (and
	// masked the world-model rows), per seed; no values for an arm without the gate.
	GateClosed Estimate
}

// GateClosedFraction is the fraction of r's steps in which the trust gate was closed; ok is
// false when r's arm does not gate or r has no steps.
func GateClosedFraction(r Result) (frac float64, ok bool) {
	if len(r.Steps) == 0 || !r.Steps[0].GateOn {
		return 0, false
	}
	closed := 0
	for _, s := range r.Steps {
		if s.Gate.Closed {
			closed++
		}
	}
	return float64(closed) / float64(len(r.Steps)), true
}

// Summarize groups results by arm (in first-seen order). The target of a seed is
// targetFraction × real-GRPO's final score in that seed; without a real-GRPO result for a seed
// its runs get no to-target statistics.
func Summarize(results []Result, targetFraction float64) []ArmSummary {
	real := map[int64]Result{}
	for _, r := range results {
		if r.Arm == ArmRealGRPO {
			real[r.Seed] = r
		}
	}
	var order []string
	byArm := map[string][]Result{}
	for _, r := range results {
		if _, ok := byArm[r.Arm]; !ok {
			order = append(order, r.Arm)
		}
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	var out []ArmSummary
	for _, name := range order {
		rs := byArm[name]
		var final, initial, execs, toExec, toSec, toTot, toStep, speed, delta, gate []float64
		reached := 0
		for _, r := range rs {
			if f, ok := GateClosedFraction(r); ok {
				gate = append(gate, f)
			}
			final = append(final, r.FinalScore())
			initial = append(initial, r.InitialScore)
			if n := len(r.Steps); n > 0 {
				execs = append(execs, float64(r.Steps[n-1].Executions))
			}
			rg, ok := real[r.Seed]
			if !ok {
				continue
			}
			delta = append(delta, r.FinalScore()-rg.FinalScore())
			target := targetFraction * rg.FinalScore()
			tt := FirstReach(r, target)
			if !tt.Reached {
				continue
			}
			reached++
			toExec = append(toExec, float64(tt.Executions))
			toSec = append(toSec, tt.ExecSeconds)
			toTot = append(toTot, tt.TotalSeconds)
			toStep = append(toStep, float64(tt.Step+1))
			if rt := FirstReach(rg, target); rt.Reached && tt.Executions > 0 {
				speed = append(speed, float64(rt.Executions)/float64(tt.Executions))
			}
		}
		out = append(out, ArmSummary{
			Arm: name, Seeds: len(rs), Reached: reached,
			Final: NewEstimate(final), Initial: NewEstimate(initial),
			ExecutionsToTarget: NewEstimate(toExec), ExecSecondsToTarget: NewEstimate(toSec),
			TotalSecondsToTarget: NewEstimate(toTot), StepsToTarget: NewEstimate(toStep),
			Speedup: NewEstimate(speed), Executions: NewEstimate(execs), FinalDelta: NewEstimate(delta),
			GateClosed: NewEstimate(gate),
		})
	}
	return out
}
