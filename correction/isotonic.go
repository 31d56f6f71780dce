package correction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Sentinel errors returned (wrapped, with the offending index) by FitIsotonic.
var (
	ErrLengthMismatch = errors.New("correction: x, y and w lengths differ")
	ErrEmpty          = errors.New("correction: no data points")
	ErrNonFinite      = errors.New("correction: NaN or Inf value")
	ErrNegativeWeight = errors.New("correction: negative weight")
	ErrZeroWeights    = errors.New("correction: all weights are zero")
)

// tieResolution is numpy's float64 resolution (1e-15). scikit-learn's
// _make_unique pools a sorted x into the current run while x − run_start <
// 1e-15 (absolute), so we do the same to reproduce its fits bit-for-bit in
// structure.
const tieResolution = 1e-15

// Isotonic is a fitted non-decreasing piecewise-linear map. It stores only
// the breakpoints scikit-learn keeps after trimming (interior points whose
// value equals both neighbours are dropped), so Predict is a binary search
// over typically few points. An Isotonic is immutable and safe for
// concurrent use.
type Isotonic struct {
	x, y []float64
}

// pair is one (world-model score, true score) observation with its weight w:
// 1 for a randomly chosen anchor, the group's inverse-propensity weight when
// anchors are chosen by a policy (Group.Weight, docs/anchors.md).
type pair struct{ x, y, w float64 }

// unitPair is a pair with weight 1, what every window held before weights.
func unitPair(x, y float64) pair { return pair{x, y, 1} }

func cmpPair(a, b pair) int {
	switch {
	case a.x < b.x:
		return -1
	case a.x > b.x:
		return 1
	case a.y < b.y:
		return -1
	case a.y > b.y:
		return 1
	case a.w < b.w:
		return -1
	case a.w > b.w:
		return 1
	}
	return 0
}

// FitIsotonic fits a weighted isotonic (non-decreasing) regression of y on x
// with scikit-learn IsotonicRegression(increasing=True, out_of_bounds="clip")
// semantics: zero-weight points are dropped, points are sorted by (x, y),
// equal x values (within 1e-15, as scikit-learn) are pooled to their
// weighted mean, and the pool-adjacent-violators algorithm is run on the
// pooled points. w may be nil for unit weights. It costs O(n log n) for the
// sort and O(n) for the fit.
func FitIsotonic(x, y, w []float64) (*Isotonic, error) {
	if len(x) != len(y) || (w != nil && len(w) != len(x)) {
		return nil, fmt.Errorf("%w: len(x)=%d len(y)=%d len(w)=%d", ErrLengthMismatch, len(x), len(y), len(w))
	}
	if len(x) == 0 {
		return nil, ErrEmpty
	}
	type sample struct{ x, y, w float64 }
	pts := make([]sample, 0, len(x))
	for i := range x {
		wi := 1.0
		if w != nil {
			wi = w[i]
		}
		if !finite(x[i]) || !finite(y[i]) || !finite(wi) {
			return nil, fmt.Errorf("%w at index %d", ErrNonFinite, i)
		}
		if wi < 0 {
			return nil, fmt.Errorf("%w at index %d: %v", ErrNegativeWeight, i, wi)
		}
		if wi > 0 {
			pts = append(pts, sample{x[i], y[i], wi})
		}
	}
	if len(pts) == 0 {
		return nil, ErrZeroWeights
	}
	slices.SortStableFunc(pts, func(a, b sample) int { return cmpPair(pair{a.x, a.y, 1}, pair{b.x, b.y, 1}) })
	sc := getScratch(len(pts))
	defer putScratch(sc)
	for _, p := range pts {
		sc.add(p.x, p.w, p.y)
	}
	bx, by, err := sc.pava()
	if err != nil {
		return nil, err
	}
	return &Isotonic{x: bx, y: by}, nil
}

// Predict evaluates the fit at x: linear interpolation between breakpoints,
// clipped to the end values outside the fitted x range. NaN maps to NaN.
func (f *Isotonic) Predict(x float64) float64 { return interpolate(f.x, f.y, x) }

// Breakpoints returns copies of the fitted breakpoints (scikit-learn's
// X_thresholds_ and y_thresholds_).
func (f *Isotonic) Breakpoints() (x, y []float64) {
	return slices.Clone(f.x), slices.Clone(f.y)
}

// interpolate is the shared evaluation of a breakpoint map. The result is
// clamped to the segment's end values so rounding can never break
// monotonicity.
func interpolate(bx, by []float64, x float64) float64 {
	n := len(bx)
	if x != x {
		return math.NaN()
	}
	if x <= bx[0] {
		return by[0]
	}
	if x >= bx[n-1] {
		return by[n-1]
	}
	// Smallest i with bx[i] >= x; here 1 <= i <= n-1.
	lo, hi := 0, n-1
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if bx[m] < x {
			lo = m
		} else {
			hi = m
		}
	}
	if bx[hi] == x {
		return by[hi]
	}
	xl, yl, xh, yh := bx[lo], by[lo], bx[hi], by[hi]
	slope := (yh - yl) / (xh - xl)
	// Explicit conversions forbid FMA fusion so results are identical on
	// every architecture (Go spec: an explicit conversion rounds).
	v := float64(slope*float64(x-xl)) + yl
	return min(max(v, yl), yh)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// fitScratch holds the per-fit working arrays; pooled so repeated refits do
// not allocate beyond the returned breakpoints. Pooled points and blocks are
// kept as (weight, mean) rather than (weight, Σw·y): merging by convex
// combination keeps every mean inside the range of its inputs even for
// subnormal weights, where w·y would lose all precision.
type fitScratch struct {
	ux, uw, um []float64 // pooled unique x, weight, weighted mean of y
	runX       float64   // x at which the current tie run started
	centred    bool      // pavaSums emits block centres (MapCentred)
	bStart     []int32
	bW, bM, bS []float64
}

var scratchPool = sync.Pool{New: func() any { return new(fitScratch) }}

func getScratch(n int) *fitScratch {
	sc := scratchPool.Get().(*fitScratch)
	sc.ux, sc.uw, sc.um = sc.ux[:0], sc.uw[:0], sc.um[:0]
	sc.centred = false
	sc.grow(n)
	return sc
}

// grow makes room for n points, doubling, so that a window filling a few pairs per step does
// not reallocate at every refit.
func (sc *fitScratch) grow(n int) {
	if cap(sc.bM) < n {
		n = max(n, 2*cap(sc.bM))
		sc.bStart = make([]int32, n)
		sc.bW = make([]float64, n)
		sc.bM = make([]float64, n)
		sc.bS = make([]float64, n)
	}
}

func putScratch(sc *fitScratch) { scratchPool.Put(sc) }

// tied reports whether x (in sorted order) joins the current tie run, as in
// scikit-learn's _make_unique: x − run_start < 1e-15.
func (sc *fitScratch) tied(x float64) bool {
	return len(sc.ux) > 0 && x-sc.runX < tieResolution
}

// add appends one weighted sample in sorted order, pooling it into the
// current tie run.
func (sc *fitScratch) add(x, w, y float64) {
	if sc.tied(x) {
		k := len(sc.ux) - 1
		sc.uw[k] += w
		sc.um[k] += float64((y - sc.um[k]) * (w / sc.uw[k]))
		return
	}
	sc.runX = x
	sc.ux = append(sc.ux, x)
	sc.uw = append(sc.uw, w)
	sc.um = append(sc.um, y)
}

// addUnitSorted appends unit-weight pairs sorted by (x, y) for pavaSums:
// um holds the sum of y per pooled point, not the mean. With unit weights
// and bounded scores sums are exact enough and need no division.
func (sc *fitScratch) addUnitSorted(ps []pair) {
	n := len(sc.ux) + len(ps)
	if cap(sc.ux) < n {
		sc.ux = slices.Grow(sc.ux, n-len(sc.ux))
		sc.uw = slices.Grow(sc.uw, n-len(sc.uw))
		sc.um = slices.Grow(sc.um, n-len(sc.um))
	}
	k := len(sc.ux) - 1
	ux, uw, um := sc.ux[:n], sc.uw[:n], sc.um[:n]
	runX, cnt, sum := sc.runX, 0.0, 0.0
	for _, p := range ps {
		if cnt > 0 && p.x-runX < tieResolution {
			cnt++
			sum += p.y
			continue
		}
		if cnt > 0 {
			uw[k], um[k] = cnt, sum
		}
		k++
		runX, cnt, sum = p.x, 1, p.y
		ux[k] = p.x
	}
	if cnt > 0 {
		uw[k], um[k] = cnt, sum
	}
	sc.ux, sc.uw, sc.um, sc.runX = ux[:k+1], uw[:k+1], um[:k+1], runX
}

// pava runs weighted pool-adjacent-violators on the pooled points and
// returns freshly allocated trimmed breakpoints: each block contributes its
// first x and, if it spans several points, its last x, both at the block
// mean — the same point set scikit-learn keeps.
func (sc *fitScratch) pava() (bx, by []float64, err error) {
	n := len(sc.ux)
	if n == 0 {
		return nil, nil, ErrEmpty
	}
	sc.grow(n)
	bStart, bW, bM := sc.bStart[:n], sc.bW[:n], sc.bM[:n]
	uw, um := sc.uw[:n], sc.um[:n]
	top := 0
	for i := range n {
		w, m := uw[i], um[i]
		start := int32(i)
		for top > 0 && bM[top-1] >= m {
			top--
			merged := bW[top] + w
			m = bM[top] + float64((m-bM[top])*(w/merged))
			w = merged
			start = bStart[top]
		}
		bStart[top], bW[top], bM[top] = start, w, m
		top++
	}
	if sc.centred {
		return sc.emitCentred(top)
	}
	return sc.emit(top)
}

// pavaSums is pava for points whose um holds sums of y (addUnitSorted). It
// compares block means by cross-multiplication, so the merge loop has no
// division on its dependency chain; each block mean is divided out once at
// the end. This is what keeps a 5000-pair refit in the tens of µs.
func (sc *fitScratch) pavaSums() (bx, by []float64, err error) {
	n := len(sc.ux)
	if n == 0 {
		return nil, nil, ErrEmpty
	}
	sc.grow(n)
	bStart, bW, bS, bM := sc.bStart[:n], sc.bW[:n], sc.bS[:n], sc.bM[:n]
	uw, us := sc.uw[:n], sc.um[:n]
	top := 0
	for i := range n {
		w, s := uw[i], us[i]
		start := int32(i)
		for top > 0 && float64(bS[top-1]*w) >= float64(s*bW[top-1]) {
			top--
			w += bW[top]
			s += bS[top]
			start = bStart[top]
		}
		bStart[top], bW[top], bS[top] = start, w, s
		top++
	}
	for b := range top {
		bM[b] = bS[b] / bW[b]
	}
	if sc.centred {
		return sc.emitCentred(top)
	}
	return sc.emit(top)
}

// emit turns the top blocks (bStart, bM) into trimmed breakpoints.
func (sc *fitScratch) emit(top int) (bx, by []float64, err error) {
	n := len(sc.ux)
	bStart, bM := sc.bStart, sc.bM
	count := 0
	for b := range top {
		if !finite(bM[b]) {
			// Only reachable when means of opposite huge signs overflow.
			return nil, nil, fmt.Errorf("%w: weighted means overflow", ErrNonFinite)
		}
		end := int32(n)
		if b+1 < top {
			end = bStart[b+1]
		}
		count++
		if end-1 > bStart[b] {
			count++
		}
	}
	bx = make([]float64, 0, count)
	by = make([]float64, 0, count)
	for b := range top {
		end := int32(n)
		if b+1 < top {
			end = bStart[b+1]
		}
		bx = append(bx, sc.ux[bStart[b]])
		by = append(by, bM[b])
		if end-1 > bStart[b] {
			bx = append(bx, sc.ux[end-1])
			by = append(by, bM[b])
		}
	}
	return bx, by, nil
}

// fitSortedPairs fits pairs already sorted by (x, y): the trimmed isotonic
// breakpoints, or with centred the block centres. A window of unit weights
// takes the sums path (pavaSums), exactly as before weights existed; any
// other weight takes weighted pool-adjacent-violators, where a block's value
// is the w-weighted mean of its pairs.
func fitSortedPairs(ps []pair, centred bool) (bx, by []float64, err error) {
	sc := getScratch(len(ps))
	defer putScratch(sc)
	sc.centred = centred
	if !unitWeights(ps) {
		for _, p := range ps {
			if p.w > 0 {
				sc.add(p.x, p.w, p.y)
			}
		}
		return sc.pava()
	}
	sc.addUnitSorted(ps)
	return sc.pavaSums()
}

func unitWeights(ps []pair) bool {
	for _, p := range ps {
		if p.w != 1 {
			return false
		}
	}
	return true
}

// emitCentred turns the top blocks into the centred-isotonic breakpoints:
// one per block, at the weighted mean of its pooled x values, with the
// block's value. Block values strictly increase after PAV and block centres
// lie inside disjoint x ranges, so both coordinates strictly increase.
func (sc *fitScratch) emitCentred(top int) (bx, by []float64, err error) {
	n := len(sc.ux)
	bx = make([]float64, 0, top)
	by = make([]float64, 0, top)
	for b := range top {
		if !finite(sc.bM[b]) {
			return nil, nil, fmt.Errorf("%w: weighted means overflow", ErrNonFinite)
		}
		end := int32(n)
		if b+1 < top {
			end = sc.bStart[b+1]
		}
		lo, hi := sc.ux[sc.bStart[b]], sc.ux[end-1]
		var sum float64
		for i := sc.bStart[b]; i < end; i++ {
			sum += float64(sc.uw[i] * sc.ux[i])
		}
		// Rounding may push the mean a hair outside the block's x range.
		bx = append(bx, min(max(sum/sc.bW[b], lo), hi))
		by = append(by, sc.bM[b])
	}
	return bx, by, nil
}
