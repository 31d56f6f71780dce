package task

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// TestTrainViewLacksValidationData walks every field reachable from a
// TrainView and checks that no path leads to a Problem and that its float
// storage holds exactly the training rows (slice capacity included).
func TestTrainViewLacksValidationData(t *testing.T) {
	p := NewProblem(1, Regression)
	v := p.Train()
	floatsSeen := 0
	var walk func(rv reflect.Value, path string)
	walk = func(rv reflect.Value, path string) {
		if rv.Type() == reflect.TypeFor[Problem]() {
			t.Fatalf("%s reaches a Problem", path)
		}
		switch rv.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !rv.IsNil() {
				walk(rv.Elem(), path+".*")
			}
		case reflect.Struct:
			for i := range rv.NumField() {
				walk(rv.Field(i), path+"."+rv.Type().Field(i).Name)
			}
		case reflect.Slice:
			if rv.Type().Elem().Kind() == reflect.Float64 {
				floatsSeen += rv.Cap()
				return
			}
			for i := range rv.Len() {
				walk(rv.Index(i), path+"[]")
			}
		case reflect.Map, reflect.Chan, reflect.Func:
			t.Fatalf("%s: unexpected %s in TrainView", path, rv.Kind())
		}
	}
	walk(reflect.ValueOf(v), "TrainView")
	if want := NumTrain*NumFeatures + NumTrain; floatsSeen != want {
		t.Fatalf("TrainView holds %d floats, want %d (train X and y only)", floatsSeen, want)
	}
	if v.Rows() != NumTrain || v.Cols() != NumFeatures {
		t.Fatalf("dims %d×%d", v.Rows(), v.Cols())
	}
	// The training rows are the problem's, not a copy of validation rows.
	if got := v.Row(0, nil); !floats.Equal(got, mat.Row(nil, 0, p.train.x)) {
		t.Fatal("Row(0) is not training row 0")
	}
}

// TestWorldModelIgnoresHeldOutData perturbs the held-out rows and labels:
// Execute must change and Predict must not, bit for bit.
func TestWorldModelIgnoresHeldOutData(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(21, 22))
	sols, _ := NewPolicy().Sample(rng, 30)
	for _, kind := range []Kind{Regression, Classification} {
		orig := NewProblem(9, kind)
		pert := NewProblem(9, kind)
		pert.valX.Apply(func(_, _ int, v float64) float64 { return v*1.5 + rng.NormFloat64() }, pert.valX)
		for i := range pert.valY {
			if kind == Classification {
				pert.valY[i] = 1 - pert.valY[i]
			} else {
				pert.valY[i] = -pert.valY[i] + rng.NormFloat64()
			}
		}
		wm := NewWorldModel(WorldModelConfig{Seed: 4})
		changed := 0
		for _, s := range sols {
			a, _ := wm.Predict(ctx, orig.Train(), s)
			b, _ := wm.Predict(ctx, pert.Train(), s)
			if math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("%v %v: prediction moved with held-out data: %v -> %v", kind, s, a, b)
			}
			x, _ := Execute(ctx, orig, s)
			y, _ := Execute(ctx, pert, s)
			if x != y {
				changed++
			}
		}
		// Many configurations already score 0 and stay there; the rest
		// must move, proving the perturbation reaches Execute.
		if changed < len(sols)/3 {
			t.Fatalf("%v: only %d/%d execute scores changed; perturbation ineffective", kind, changed, len(sols))
		}
		t.Logf("%v: %d/%d execute scores changed, 0 predictions changed", kind, changed, len(sols))
	}
}

type pairs struct {
	sols      []Solution
	truth, wm []float64
}

var (
	proxyOnce sync.Once
	proxyData map[Kind]pairs
)

// proxyPairs executes and predicts 200 solutions from the uniform policy on
// one problem per kind, shared by the tests below.
func proxyPairs(t *testing.T) map[Kind]pairs {
	t.Helper()
	proxyOnce.Do(func() {
		proxyData = map[Kind]pairs{}
		ctx := context.Background()
		sols, _ := NewPolicy().Sample(rand.New(rand.NewPCG(31, 32)), 200)
		wm := NewWorldModel(WorldModelConfig{})
		for _, kind := range []Kind{Regression, Classification} {
			p := NewProblem(17, kind)
			d := pairs{sols: sols, truth: make([]float64, len(sols)), wm: make([]float64, len(sols))}
			for i, s := range sols {
				var err error
				if d.truth[i], err = Execute(ctx, p, s); err != nil {
					panic(err)
				}
				if d.wm[i], err = wm.Predict(ctx, p.Train(), s); err != nil {
					panic(err)
				}
			}
			proxyData[kind] = d
		}
	})
	return proxyData
}

func TestScoresInUnitInterval(t *testing.T) {
	for kind, d := range proxyPairs(t) {
		for i := range d.sols {
			for _, v := range []float64{d.truth[i], d.wm[i]} {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("%v %v: score %v outside [0,1]", kind, d.sols[i], v)
				}
			}
		}
	}
}

// TestProxyCorrelatedButBiased checks loose, honest properties of the proxy
// and logs the measured numbers.
func TestProxyCorrelatedButBiased(t *testing.T) {
	for _, kind := range []Kind{Regression, Classification} {
		d := proxyPairs(t)[kind]
		rho := spearman(d.truth, d.wm)
		mt, st := stat.PopMeanStdDev(d.truth, nil)
		mw, sw := stat.PopMeanStdDev(d.wm, nil)
		// Optimism on configurations that interpolate their training rows.
		var overfit, rest []float64
		for i, s := range d.sols {
			gap := d.wm[i] - d.truth[i]
			e := s.Effective()
			if (e.Model == KNN && e.Capacity == 0) || (e.Model == RandomNet && e.Reg == 0) {
				overfit = append(overfit, gap)
			} else {
				rest = append(rest, gap)
			}
		}
		bo, br := stat.Mean(overfit, nil), stat.Mean(rest, nil)
		t.Logf("%v: n=%d spearman=%.3f pearson=%.3f true mean=%.3f sd=%.3f | wm mean=%.3f sd=%.3f | bias=%+.3f | overfit bias=%+.3f (n=%d) other bias=%+.3f",
			kind, len(d.sols), rho, stat.Correlation(d.truth, d.wm, nil), mt, st, mw, sw, mw-mt, bo, len(overfit), br)
		if rho < 0.3 || rho > 0.95 {
			t.Errorf("spearman %.3f: want informative (>0.3) but imperfect (<0.95)", rho)
		}
		if mw-mt < 0.02 {
			t.Errorf("mean bias %+.3f: the read-out floor and in-sample term should make the proxy optimistic", mw-mt)
		}
		if len(overfit) < 5 || bo < br+0.1 {
			t.Errorf("overfitting configs bias %+.3f (n=%d) not clearly above others %+.3f", bo, len(overfit), br)
		}
		// Compressed range: E[wm | truth] moves less than the truth
		// (sample noise can still inflate the raw sd of the proxy).
		if _, slope := stat.LinearRegression(d.truth, d.wm, nil, false); slope >= 0.9 {
			t.Errorf("slope of proxy on truth %.3f: range should be compressed", slope)
		} else {
			t.Logf("%v: slope of proxy on truth %.3f", kind, slope)
		}
	}
}

// TestProxyErrorsComeFromShortcuts shows where the proxy's errors come
// from: another seed draws another subsample and moves the predictions
// (noise), and turning every fidelity knob up (more rows, full iterations
// and capacity, no in-sample term, identity read-out) makes the proxy track
// the truth closely with little bias.
func TestProxyErrorsComeFromShortcuts(t *testing.T) {
	ctx := context.Background()
	p := NewProblem(17, Regression)
	d := proxyPairs(t)[Regression]
	var spread []float64
	for _, s := range d.sols[:60] {
		var v []float64
		for seed := range int64(6) {
			x, err := NewWorldModel(WorldModelConfig{Seed: seed}).Predict(ctx, p.Train(), s)
			if err != nil {
				t.Fatal(err)
			}
			v = append(v, x)
		}
		spread = append(spread, stat.StdDev(v, nil))
	}
	noise := stat.Mean(spread, nil)
	hi := WorldModelConfig{Subsample: 480, Probe: 120, IterFraction: 1, CapacityFraction: 1, Optimism: 0, Floor: 0, Ceil: 1, Gamma: 1}
	wmHi := NewWorldModel(hi)
	pred := make([]float64, len(d.sols))
	for i, s := range d.sols {
		var err error
		if pred[i], err = wmHi.Predict(ctx, p.Train(), s); err != nil {
			t.Fatal(err)
		}
	}
	rhoLo, rhoHi := spearman(d.truth, d.wm), spearman(d.truth, pred)
	biasLo := math.Abs(stat.Mean(d.wm, nil) - stat.Mean(d.truth, nil))
	biasHi := math.Abs(stat.Mean(pred, nil) - stat.Mean(d.truth, nil))
	t.Logf("seed-to-seed sd %.3f; default proxy: spearman %.3f |bias| %.3f; high-fidelity proxy: spearman %.3f |bias| %.3f",
		noise, rhoLo, biasLo, rhoHi, biasHi)
	if noise < 0.01 {
		t.Errorf("seed-to-seed sd %.4f: the subsample draw should add noise", noise)
	}
	if rhoHi < rhoLo+0.1 || biasHi > biasLo {
		t.Errorf("high fidelity did not remove the proxy's error: spearman %.3f vs %.3f, |bias| %.3f vs %.3f", rhoHi, rhoLo, biasHi, biasLo)
	}
}

func TestWorldModelConfig(t *testing.T) {
	if got := NewWorldModel(WorldModelConfig{Seed: 3}).Config(); got.Subsample != DefaultWorldModelConfig().Subsample || got.Seed != 3 {
		t.Fatalf("zero config not defaulted: %+v", got)
	}
	mod := func(f func(*WorldModelConfig)) WorldModelConfig {
		c := DefaultWorldModelConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  WorldModelConfig
		ok   bool
	}{
		{"default", DefaultWorldModelConfig(), true},
		{"no optimism", mod(func(c *WorldModelConfig) { c.Optimism = 0 }), true},
		{"identity read-out", mod(func(c *WorldModelConfig) { c.Floor, c.Ceil, c.Gamma = 0, 1, 1 }), true},
		{"tiny subsample", mod(func(c *WorldModelConfig) { c.Subsample = 1 }), false},
		{"too many rows", mod(func(c *WorldModelConfig) { c.Subsample, c.Probe = 500, 101 }), false},
		{"zero iterations", mod(func(c *WorldModelConfig) { c.IterFraction = 0 }), false},
		{"capacity > 1", mod(func(c *WorldModelConfig) { c.CapacityFraction = 1.5 }), false},
		{"optimism NaN", mod(func(c *WorldModelConfig) { c.Optimism = math.NaN() }), false},
		{"floor above ceil", mod(func(c *WorldModelConfig) { c.Floor, c.Ceil = 0.8, 0.2 }), false},
		{"gamma 0", mod(func(c *WorldModelConfig) { c.Gamma = 0 }), false},
	}
	p := NewProblem(1, Regression)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			sc, perr := NewWorldModel(tt.cfg).Predict(context.Background(), p.Train(), Solution{Features: Standardize})
			if (err == nil) != (perr == nil) || (perr != nil && !errors.Is(perr, ErrInvalidConfig)) {
				t.Fatalf("Predict err = %v, want %v", perr, err)
			}
			if perr == nil && !(sc >= tt.cfg.Floor && sc <= tt.cfg.Ceil) {
				t.Fatalf("score %v outside [Floor, Ceil]", sc)
			}
		})
	}
	if _, err := NewWorldModel(WorldModelConfig{}).Predict(context.Background(), TrainView{}, Solution{}); !errors.Is(err, ErrNoProblem) {
		t.Fatalf("zero TrainView: %v", err)
	}
}

func spearman(a, b []float64) float64 { return stat.Correlation(ranks(a), ranks(b), nil) }

// ranks returns average ranks (ties share the mean rank).
func ranks(x []float64) []float64 {
	s := append([]float64(nil), x...)
	idx := make([]int, len(x))
	floats.ArgsortStable(s, idx)
	r := make([]float64, len(x))
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[i] {
			j++
		}
		for k := i; k <= j; k++ {
			r[idx[k]] = float64(i+j) / 2
		}
		i = j + 1
	}
	return r
}
