package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// goldenSolutions cover every model family and feature transform, including
// a diverging configuration.
var goldenSolutions = []Solution{
	{Model: Ridge, Features: Poly2, Reg: 3},
	{Model: Ridge, Features: Raw, Reg: 4},
	{Model: GradientDescent, Features: Standardize, Reg: 2, LR: 1, Iters: 2},
	{Model: GradientDescent, Features: Raw, Reg: 0, LR: 3, Iters: 3},
	{Model: KNN, Features: Standardize, Capacity: 2},
	{Model: KNN, Features: Fourier, Capacity: 0},
	{Model: RandomNet, Features: Standardize, Reg: 3, Capacity: 2},
	{Model: Boosting, Features: Poly2, Reg: 1, LR: 1, Iters: 3},
}

// TestExecuteGolden pins the exact scores, so an accidental change to the
// data generator or the learners (which would break replays of recorded
// runs) is caught. Bit-exact on amd64; other architectures may fuse
// multiply-adds, so there the check is to 1e-9.
func TestExecuteGolden(t *testing.T) {
	ctx := context.Background()
	var b bytes.Buffer
	got := map[string]float64{}
	for _, kind := range []Kind{Regression, Classification} {
		p := NewProblem(7, kind)
		wm := NewWorldModel(WorldModelConfig{})
		for _, s := range goldenSolutions {
			sc, err := Execute(ctx, p, s)
			if err != nil {
				t.Fatal(err)
			}
			pr, err := wm.Predict(ctx, p.Train(), s)
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("%s %s", p, s)
			got[key+" execute"], got[key+" predict"] = sc, pr
			fmt.Fprintf(&b, "%s\texecute=%s\tpredict=%s\n", key, strconv.FormatFloat(sc, 'x', -1, 64), strconv.FormatFloat(pr, 'x', -1, 64))
		}
	}
	if *update {
		golden(t, "scores.golden", b.Bytes())
	}
	tol := 0.0
	if runtime.GOARCH != "amd64" {
		tol = 1e-9
		t.Logf("GOARCH=%s: comparing to %g", runtime.GOARCH, tol)
	}
	want, err := readGoldenScores()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Fatalf("golden has %d scores, computed %d", len(want), len(got))
	}
	for k, v := range got {
		w, ok := want[k]
		if !ok || math.Abs(v-w) > tol {
			t.Errorf("%s = %v, golden %v (present %v)", k, v, w, ok)
		}
	}
}

func TestExecuteDeterministic(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	sols, err := NewPolicy().Sample(rng, 24)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []Kind{Regression, Classification} {
		first := make([]float64, len(sols))
		for i, s := range sols {
			if first[i], err = Execute(ctx, NewProblem(3, kind), s); err != nil {
				t.Fatal(err)
			}
		}
		// Again on a fresh problem, concurrently, to catch shared state.
		var wg sync.WaitGroup
		again := make([]float64, len(sols))
		p := NewProblem(3, kind)
		for i, s := range sols {
			wg.Go(func() { again[i], _ = Execute(ctx, p, s) })
		}
		wg.Wait()
		for i := range sols {
			if math.Float64bits(first[i]) != math.Float64bits(again[i]) {
				t.Errorf("%v %v: %v then %v", kind, sols[i], first[i], again[i])
			}
		}
	}
}

func TestIgnoredDecisionsDoNotMatter(t *testing.T) {
	ctx := context.Background()
	p := NewProblem(5, Regression)
	wm := NewWorldModel(WorldModelConfig{})
	for _, base := range goldenSolutions {
		variant := base
		// Flip every decision the family ignores.
		c := variant.choices()
		for d := range c {
			if !uses[base.Model][d] {
				c[d] = (c[d] + 1) % decisionSizes[d]
			}
		}
		variant = fromChoices(c)
		a, _ := Execute(ctx, p, base)
		b, _ := Execute(ctx, p, variant)
		x, _ := wm.Predict(ctx, p.Train(), base)
		y, _ := wm.Predict(ctx, p.Train(), variant)
		if a != b || x != y {
			t.Errorf("%v vs %+v: execute %v/%v predict %v/%v", base, variant, a, b, x, y)
		}
	}
}

func TestProblemsDiffer(t *testing.T) {
	ctx := context.Background()
	s := Solution{Model: Ridge, Features: Poly2, Reg: 3}
	a, _ := Execute(ctx, NewProblem(1, Regression), s)
	b, _ := Execute(ctx, NewProblem(2, Regression), s)
	if a == b {
		t.Fatalf("seeds 1 and 2 give the same score %v", a)
	}
}

func TestExecuteErrors(t *testing.T) {
	ctx := context.Background()
	p := NewProblem(1, Regression)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		p    *Problem
		s    Solution
		want error
	}{
		{"nil problem", ctx, nil, Solution{}, ErrNoProblem},
		{"bad kind", ctx, NewProblem(1, Kind(9)), Solution{}, ErrInvalidKind},
		{"bad solution", ctx, p, Solution{Iters: 9}, ErrInvalidSolution},
		{"cancelled", cancelled, p, Solution{Model: Boosting, Iters: 3}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Execute(tt.ctx, tt.p, tt.s); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// cancelAfter is a context whose Err turns to Canceled after n calls, to
// cancel deterministically inside a fit's iteration loop.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n <= 0 {
		return context.Canceled
	}
	c.n--
	return nil
}

func TestCancelDuringFit(t *testing.T) {
	p := NewProblem(1, Regression)
	for _, s := range []Solution{{Model: Boosting, Iters: 3}, {Model: GradientDescent, Iters: 3}} {
		ctx := &cancelAfter{Context: context.Background(), n: 1}
		if _, err := Execute(ctx, p, s); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v: err = %v, want context.Canceled from inside the fit", s, err)
		}
	}
}

func readGoldenScores() (map[string]float64, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "scores.golden"))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("bad golden line %q", line)
		}
		for _, kv := range f[1:] {
			name, val, _ := strings.Cut(kv, "=")
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, err
			}
			out[f[0]+" "+name] = v
		}
	}
	return out, nil
}

func TestExecutorOverhead(t *testing.T) {
	p := NewProblem(1, Regression)
	s := Solution{Model: Ridge, Features: Standardize, Reg: 2}
	want, _ := Execute(context.Background(), p, s)
	r, err := Executor{Overhead: 20 * time.Millisecond}.Run(context.Background(), p, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Score != want || r.Overhead != 20*time.Millisecond || r.Compute <= 0 {
		t.Fatalf("report %+v, want score %v", r, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := (Executor{Overhead: time.Hour}).Run(ctx, p, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("overhead wait ignored the context")
	}
}

func TestScoreEdgeCases(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		pred, y []float64
		want    float64
	}{
		{"perfect regression", Regression, []float64{1, 2, 3}, []float64{1, 2, 3}, 1},
		{"worse than mean clips to 0", Regression, []float64{3, 2, 1}, []float64{1, 2, 3}, 0},
		{"NaN prediction", Regression, []float64{math.NaN(), 2, 3}, []float64{1, 2, 3}, 0},
		{"constant target", Regression, []float64{1, 1}, []float64{1, 1}, 0},
		{"perfect classification", Classification, []float64{-1, 1, 1}, []float64{0, 1, 1}, 1},
		{"constant prediction is chance", Classification, []float64{1, 1, 1, 1}, []float64{0, 1, 1, 1}, 0},
		{"inverted clips to 0", Classification, []float64{1, -1}, []float64{0, 1}, 0},
		{"half right on each class", Classification, []float64{1, -1, 1, -1}, []float64{1, 1, 0, 0}, 0},
		{"length mismatch", Regression, []float64{1}, []float64{1, 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := score(tt.kind, tt.pred, tt.y); got != tt.want {
				t.Fatalf("score = %v, want %v", got, tt.want)
			}
		})
	}
}
