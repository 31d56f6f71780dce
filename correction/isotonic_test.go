package correction

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestFitIsotonicErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name    string
		x, y, w []float64
		want    error
	}{
		{"empty", nil, nil, nil, ErrEmpty},
		{"length x y", []float64{1, 2}, []float64{1}, nil, ErrLengthMismatch},
		{"length w", []float64{1, 2}, []float64{1, 2}, []float64{1}, ErrLengthMismatch},
		{"nan x", []float64{nan}, []float64{1}, nil, ErrNonFinite},
		{"inf y", []float64{1}, []float64{inf}, nil, ErrNonFinite},
		{"nan w", []float64{1}, []float64{1}, []float64{nan}, ErrNonFinite},
		{"negative w", []float64{1, 2}, []float64{1, 2}, []float64{1, -1}, ErrNegativeWeight},
		{"all zero w", []float64{1, 2}, []float64{1, 2}, []float64{0, 0}, ErrZeroWeights},
		{"overflowing means", []float64{1, 2}, []float64{math.MaxFloat64, -math.MaxFloat64}, nil, ErrNonFinite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := FitIsotonic(tt.x, tt.y, tt.w)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if f != nil {
				t.Fatal("non-nil fit with error")
			}
		})
	}
}

// minMaxFit is the closed form of isotonic regression over pooled points:
// fit_i = max_{j≤i} min_{k≥i} (Σ_{j..k} w·y)/(Σ_{j..k} w), O(n²) per point.
func minMaxFit(ux, uw, us []float64) []float64 {
	n := len(ux)
	out := make([]float64, n)
	for i := range n {
		best := math.Inf(-1)
		for j := 0; j <= i; j++ {
			lo := math.Inf(1)
			var sw, ss float64
			for k := j; k < n; k++ {
				sw += uw[k]
				ss += us[k]
				if k >= i {
					lo = math.Min(lo, ss/sw)
				}
			}
			best = math.Max(best, lo)
		}
		out[i] = best
	}
	return out
}

// pooledPoints sorts and pools ties exactly as FitIsotonic documents, with
// an independent implementation (no scratch, no sort of pairs).
func pooledPoints(x, y, w []float64) (ux, uw, us []float64) {
	idx := make([]int, 0, len(x))
	for i := range x {
		if w[i] > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		if x[a] != x[b] {
			if x[a] < x[b] {
				return -1
			}
			return 1
		}
		if y[a] < y[b] {
			return -1
		} else if y[a] > y[b] {
			return 1
		}
		return 0
	})
	run := math.Inf(-1)
	for _, i := range idx {
		if len(ux) > 0 && x[i]-run < 1e-15 {
			uw[len(uw)-1] += w[i]
			us[len(us)-1] += w[i] * y[i]
			continue
		}
		run = x[i]
		ux, uw, us = append(ux, x[i]), append(uw, w[i]), append(us, w[i]*y[i])
	}
	return
}

// TestIsotonicMinMaxProperty checks the fitted value at every sorted pooled
// point against the max–min formula on random weighted inputs with ties.
func TestIsotonicMinMaxProperty(t *testing.T) {
	r := &splitMix64{s: 42}
	for trial := range 300 {
		n := 1 + int(r.next()%40)
		levels := 1 + int(r.next()%12) // few levels => many ties
		x, y, w := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range n {
			x[i] = math.Floor(r.u()*float64(levels)) / float64(levels)
			y[i] = r.u()*2 - 0.5
			w[i] = math.Floor(r.u()*4) * 0.5 // includes zeros
		}
		w[0] = 1
		f, err := FitIsotonic(x, y, w)
		if err != nil {
			t.Fatal(err)
		}
		ux, uw, us := pooledPoints(x, y, w)
		want := minMaxFit(ux, uw, us)
		var sw, sfit, sy float64
		for i := range ux {
			got := f.Predict(ux[i])
			if !closeTo(got, want[i], 1e-12) {
				t.Fatalf("trial %d: fit at pooled x[%d]=%v is %v, max-min formula %v", trial, i, ux[i], got, want[i])
			}
			if i > 0 && got < f.Predict(ux[i-1]) {
				t.Fatalf("trial %d: fit decreases at %d", trial, i)
			}
			sw += uw[i]
			sfit += uw[i] * got
			sy += us[i]
		}
		// PAV preserves the weighted mean.
		if !closeTo(sfit/sw, sy/sw, 1e-12) {
			t.Fatalf("trial %d: weighted mean %v, fit mean %v", trial, sy/sw, sfit/sw)
		}
	}
}

func TestPredictInterpolationAndClip(t *testing.T) {
	f, err := FitIsotonic([]float64{0, 1, 2}, []float64{0, 10, 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ x, want float64 }{
		{-5, 0}, {0, 0}, {0.25, 2.5}, {1, 10}, {1.5, 15}, {2, 20}, {99, 20},
	}
	for _, tt := range tests {
		if got := f.Predict(tt.x); got != tt.want {
			t.Errorf("Predict(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
	if !math.IsNaN(f.Predict(math.NaN())) {
		t.Error("Predict(NaN) is not NaN")
	}
}

// TestNaiveMatchesIncremental checks the window's incrementally kept order
// against sort-then-PAV after many insertions and evictions.
func TestNaiveMatchesIncremental(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 97
	cfg.MinPairs = 10
	st := mustNew(t, cfg).NewState("r", "s")
	r := &splitMix64{s: 7}
	for step := range 60 {
		k := int(r.next() % 30)
		if step%10 == 9 {
			k = 150 // more than the window: exercises the element-wise merge
		}
		ps := make([]pair, k)
		for i := range ps {
			ps[i] = unitPair(math.Floor(r.u()*15)/15, math.Floor(r.u()*4)/4)
		}
		st.addPairs(ps)
		if err := st.maybeRefit(); err != nil {
			t.Fatal(err)
		}
		naive := st.win.pairs()
		slices.SortFunc(naive, cmpPair)
		if !slices.Equal(naive, st.sorted) {
			t.Fatalf("step %d: sorted view diverged from the ring", step)
		}
		if st.Pairs() >= cfg.MinPairs && k > 0 {
			bx, by, err := naiveRefit(&st.win)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(bx, st.fitX) || !slices.Equal(by, st.fitY) {
				t.Fatalf("step %d: incremental fit differs from sort-then-PAV", step)
			}
		}
	}
}

// naiveRefit is the baseline the benchmarks compare against: copy the
// window, sort it, run PAV.
func naiveRefit(win *fifo) (bx, by []float64, err error) {
	ps := win.pairs()
	slices.SortFunc(ps, cmpPair)
	return fitSortedPairs(ps, false)
}
