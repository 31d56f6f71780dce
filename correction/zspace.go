package correction

import (
	"math"
)

// The z-space map (MapZSpace) is the authors' abandoned variant, written
// here from its description (doc.go): the window holds within-group
// standardised anchor pairs (z_wm, z_exec), φ(z) = E[z_exec | z_wm] is fitted
// by quantile bins over z_wm with a weighted PAV of the bins' mean z_exec,
// and φ is applied to world-model advantages, not rewards.

// ZSpaceConfig is DefaultConfig with the z-space map and the settings of the
// authors' variant: 12 quantile bins and 400 pairs before the first fit.
func ZSpaceConfig() Config {
	c := DefaultConfig()
	c.Map = MapZSpace
	c.Bins = 12
	c.MinPairs = 400
	return c
}

// fitWindow fits the default mode's map of the kind the config names on the
// sorted window; a nil map (no error) means the window cannot define one yet.
func (s *State) fitWindow() (bx, by []float64, err error) {
	if s.cfg.Map == MapZSpace {
		bx, by = fitZSpace(s.sorted, s.cfg.Bins)
		return bx, by, nil
	}
	return fitSortedPairs(s.sorted, s.cfg.Map == MapCentred)
}

// fitZSpace fits φ on the window sorted by (x, y): bin edges are the
// quantiles of x at linspace(0, 1, bins+1) (numpy's default linear method),
// repeated edges collapse to one, and x belongs to the bin of the number of
// inner edges ≤ x (np.digitize), so bins are contiguous runs of the sorted
// window. Each non-empty bin gives a breakpoint at its mean x with its mean
// y, and a weighted PAV (weights = counts) pools strictly decreasing
// neighbours. Fewer than 3 distinct edges (z_wm nearly constant) or fewer
// than 2 bins give no map. Sums run over the sorted window, so the fit is a
// function of the window's multiset only.
func fitZSpace(ps []pair, bins int) (bx, by []float64) {
	n := len(ps)
	if n < 2 || bins < 2 {
		return nil, nil
	}
	edges := make([]float64, 0, bins+1)
	for k := 0; k <= bins; k++ {
		q := quantileSorted(ps, float64(k)/float64(bins))
		if len(edges) == 0 || q > edges[len(edges)-1] {
			edges = append(edges, q)
		}
	}
	if len(edges) < 3 {
		return nil, nil
	}
	inner := edges[1 : len(edges)-1]
	var cx, cy, cw []float64
	e, i := 0, 0
	for i < n {
		// The bin of ps[i]: the number of inner edges ≤ x.
		for e < len(inner) && inner[e] <= ps[i].x {
			e++
		}
		j := i
		var sx, sy float64
		for j < n && (e == len(inner) || ps[j].x < inner[e]) {
			sx += ps[j].x
			sy += ps[j].y
			j++
		}
		w := float64(j - i)
		mx, my := sx/w, sy/w
		if k := len(cx) - 1; k >= 0 && !(mx > cx[k]) {
			// Rounding put this bin's mean x on its neighbour's: pool them so
			// breakpoints stay strictly increasing.
			tw := cw[k] + w
			cx[k] = (cx[k]*cw[k] + sx) / tw
			cy[k] = (cy[k]*cw[k] + sy) / tw
			cw[k] = tw
		} else {
			cx, cy, cw = append(cx, mx), append(cy, my), append(cw, w)
		}
		i = j
	}
	if len(cx) < 2 {
		return nil, nil
	}
	val, wt, cnt := make([]float64, 0, len(cy)), make([]float64, 0, len(cy)), make([]int, 0, len(cy))
	for k := range cy {
		val, wt, cnt = append(val, cy[k]), append(wt, cw[k]), append(cnt, 1)
		for m := len(val); m > 1 && val[m-2] > val[m-1]; m = len(val) {
			nw := wt[m-2] + wt[m-1]
			val[m-2] = (val[m-2]*wt[m-2] + val[m-1]*wt[m-1]) / nw
			wt[m-2], cnt[m-2] = nw, cnt[m-2]+cnt[m-1]
			val, wt, cnt = val[:m-1], wt[:m-1], cnt[:m-1]
		}
	}
	by = make([]float64, 0, len(cx))
	for b, v := range val {
		for range cnt[b] {
			by = append(by, v)
		}
	}
	// A pooled mean can exceed its successor by rounding; keep the map monotone.
	for k := 1; k < len(by); k++ {
		by[k] = math.Max(by[k], by[k-1])
	}
	return cx, by
}

// quantileSorted is np.quantile(x, q) (linear method) of the x of ps, which
// is sorted by x.
func quantileSorted(ps []pair, q float64) float64 {
	pos := q * float64(len(ps)-1)
	lo := int(math.Floor(pos))
	if lo >= len(ps)-1 {
		return ps[len(ps)-1].x
	}
	frac := pos - float64(lo)
	a, b := ps[lo].x, ps[lo+1].x
	return a + frac*(b-a)
}

// standardise writes (v − mean)/(std + eps) of vals into z, with std over
// n − ddof (population for ddof 0); it returns the denominator. The caller
// guarantees len(vals) ≥ 2.
func standardise(vals, z []float64, eps float64, ddof int) float64 {
	n := float64(len(vals))
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	mean := sum / n
	ss := 0.0
	for _, v := range vals {
		d := v - mean
		ss += float64(d * d)
	}
	dof := n
	if ddof == 1 {
		dof = n - 1
	}
	denom := math.Sqrt(ss/dof) + eps
	for i, v := range vals {
		z[i] = 0
		if denom > 0 {
			z[i] = (v - mean) / denom
		}
	}
	return denom
}

// zPairs appends the standardised pairs of one anchor group: the rollouts
// with both scores, each score standardised within the group with the
// config's eps and ddof. Groups with fewer than 2 such rollouts give none.
func zPairs(dst []pair, pred, exec []float64, eps float64, ddof int) []pair {
	if len(pred) < 2 {
		return dst
	}
	zp, ze := make([]float64, len(pred)), make([]float64, len(exec))
	standardise(pred, zp, eps, ddof)
	standardise(exec, ze, eps, ddof)
	for i := range zp {
		dst = append(dst, unitPair(zp[i], ze[i]))
	}
	return dst
}

// applyZSpace replaces a world-model group's advantages by φ of their
// standardised form: GRPO advantages are z already, so A = φ(A); Dr.GRPO
// advantages are rescaled, A = φ(A/d)·d with d = std + eps of the group's
// usable rewards. A group without spread in its rewards keeps advantage 0
// (its z is undefined). Masked rows stay 0.
func (s *State) applyZSpace(vals []float64, mask []bool, adv []float64) {
	if s.fitX == nil {
		return
	}
	var used []float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, v := range vals {
		if mask[i] {
			used = append(used, v)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if len(used) < 2 || !(hi > lo) {
		return
	}
	scale := 1.0
	if s.cfg.Advantage == DrGRPO {
		scale = standardise(used, used, s.cfg.Eps, s.cfg.DDOF)
	}
	for i := range adv {
		if mask[i] {
			adv[i] = interpolate(s.fitX, s.fitY, adv[i]/scale) * scale
		}
	}
}
