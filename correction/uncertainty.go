package correction

import (
	"math"
	"slices"
)

// MapUncertainty is the local standard error of the isotonic fit of a window, the signal of the
// routed anchor policy (docs/anchors.md, "Policies"): for a world-model score x, the fitted block
// that holds x has n_b anchor pairs with residual variance s_b² around the block's value (the
// window's pooled residual variance when the block has fewer than 2 pairs), and u(x) = s_b/√n_b.
// A score outside the window's range of anchor scores gets the largest u of the window; with
// fewer than 2 pairs every score gets 1. It measures what an anchor buys: a tighter calibration
// where the policy's rollouts currently land. A MapUncertainty is immutable.
type MapUncertainty struct {
	lo, hi, u []float64 // per block: x range and standard error, blocks in x order
	maxU      float64
}

// Uncertainty returns the map uncertainty of the state's current window. Blocks are those of the
// window's weighted isotonic fit (the fit the next refit would make), so the signal exists before
// the first map is in force (MinPairs) as soon as the window holds 2 pairs.
func (s *State) Uncertainty() *MapUncertainty {
	ps := s.sorted
	if s.cfg.Mode != ModeDefault || s.cfg.Map == MapZSpace {
		// Only the default mode keeps a sorted view; the z-space window holds standardised
		// pairs, so its blocks are not in score units — the raw scores' fit is not available.
		ps = s.win.pairs()
		slices.SortFunc(ps, cmpPair)
	}
	return uncertaintyOf(ps)
}

// uncertaintyOf computes the blocks of ps, sorted by (x, y), by weighted pool-adjacent-violators.
func uncertaintyOf(ps []pair) *MapUncertainty {
	if len(ps) < 2 {
		return &MapUncertainty{maxU: 1}
	}
	type block struct {
		lo, hi float64 // x range
		w, m   float64 // weight and weighted mean of y
		i, j   int     // pairs ps[i:j]
	}
	var st []block
	for i := 0; i < len(ps); {
		// Pool ties as fitSortedPairs does (x − run start < 1e-15).
		j := i
		b := block{lo: ps[i].x, hi: ps[i].x, i: i}
		for j < len(ps) && (j == i || ps[j].x-ps[i].x < tieResolution) {
			if ps[j].w > 0 {
				b.w += ps[j].w
				b.m += (ps[j].y - b.m) * (ps[j].w / b.w)
			}
			b.hi = ps[j].x
			j++
		}
		b.j = j
		i = j
		for len(st) > 0 && st[len(st)-1].m >= b.m {
			t := st[len(st)-1]
			st = st[:len(st)-1]
			if w := t.w + b.w; w > 0 {
				b.m = t.m + (b.m-t.m)*(b.w/w)
				b.w = w
			}
			b.lo, b.i = t.lo, t.i
		}
		st = append(st, b)
	}
	var ssAll float64
	ss := make([]float64, len(st))
	for k, b := range st {
		for _, p := range ps[b.i:b.j] {
			d := p.y - b.m
			ss[k] += d * d
		}
		ssAll += ss[k]
	}
	pooled := ssAll / float64(len(ps)-1)
	mu := &MapUncertainty{lo: make([]float64, len(st)), hi: make([]float64, len(st)), u: make([]float64, len(st))}
	for k, b := range st {
		n := float64(b.j - b.i)
		v := pooled
		if b.j-b.i >= 2 {
			v = ss[k] / (n - 1)
		}
		mu.lo[k], mu.hi[k] = b.lo, b.hi
		mu.u[k] = math.Sqrt(v / n)
		mu.maxU = max(mu.maxU, mu.u[k])
	}
	return mu
}

// At is u(x). A score between two blocks (where the fit interpolates) gets the larger of their
// standard errors; NaN gets the largest.
func (m *MapUncertainty) At(x float64) float64 {
	n := len(m.u)
	if n == 0 || !(x >= m.lo[0]) || x > m.hi[n-1] {
		return m.maxU
	}
	k, _ := slices.BinarySearch(m.hi, x) // first block with hi ≥ x
	if x >= m.lo[k] {
		return m.u[k]
	}
	return max(m.u[k], m.u[k-1])
}

// Max is the largest standard error of the window's blocks, the u of scores outside its range
// (1 when the window has fewer than 2 pairs).
func (m *MapUncertainty) Max() float64 { return m.maxU }
