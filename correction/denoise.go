package correction

import "math"

// noiseRatio is the per-group estimate s² = mean(((d−d̄) − (s−s̄))²)/var(s)
// with population variances; ok is false when the group must be skipped
// (fewer than 2 pairs or var(s) < 1e-9).
func noiseRatio(d, t []float64) (r float64, ok bool) {
	n := len(d)
	if n < 2 {
		return 0, false
	}
	var sd, st float64
	for i := range n {
		sd += d[i]
		st += t[i]
	}
	md, mt := sd/float64(n), st/float64(n)
	var vt, ve float64
	for i := range n {
		dt := t[i] - mt
		vt += float64(dt * dt)
		e := (d[i] - md) - dt
		ve += float64(e * e)
	}
	vt /= float64(n)
	if vt < 1e-9 {
		return 0, false
	}
	return (ve / float64(n)) / vt, true
}

// noiseRatioNumpy is the authors' group_disagreement with numpy's
// summation order: var(s) first (skip below 1e-9, which also skips single
// pairs), then mean(((d−d̄)−(s−s̄))²)/var(s).
func noiseRatioNumpy(d, t []float64) (r float64, ok bool) {
	n := len(d)
	if n == 0 {
		return 0, false
	}
	scratch := make([]float64, 0, n)
	vt := npVar(t, scratch, 0)
	if vt < 1e-9 {
		return 0, false
	}
	md, mt := npMean(d), npMean(t)
	for i := range n {
		e := (d[i] - md) - (t[i] - mt)
		scratch = append(scratch, float64(e*e))
	}
	return (npSum(scratch) / float64(n)) / vt, true
}

// freezeFloor is the smallest EWMA at which c = 1/s̄² is frozen (the
// authors' InverseVarianceWeighter.maybe_calibrate waits for s̄² > 1e-12).
const freezeFloor = 1e-12

// observeGroup folds one anchor group's estimate into the EWMA and freezes
// c once FreezeAfter groups have been seen (reference mode), so that the
// weight is 2 at that moment. Reference mode clamps the half-life to >= 1,
// as the authors do. rel is the group's inverse-propensity weight relative
// to the step's anchor rows (1 without weights): a group of weight rel moves
// the EWMA as rel groups with its estimate would, α = 1 − ½^(rel/half-life),
// so the smoothed variance weights groups as the isotonic fit weights pairs.
func (s *State) observeGroup(d, t []float64, rel float64) {
	noise, hl := noiseRatio, s.cfg.HalfLife
	if s.cfg.Mode == ModeReference {
		noise, hl = noiseRatioNumpy, max(hl, 1)
	}
	r, ok := noise(d, t)
	if !ok {
		s.skipped++
		return
	}
	if s.groups == 0 {
		s.ewma = r
	} else {
		alpha := 1 - math.Pow(0.5, 1/hl)
		if rel != 1 {
			alpha = 1 - math.Pow(0.5, rel/hl)
		}
		s.ewma = float64((1-alpha)*s.ewma) + float64(alpha*r)
	}
	s.groups++
	if s.cfg.FreezeAfter > 0 && !s.frozen && s.groups >= uint64(s.cfg.FreezeAfter) && s.ewma > freezeFloor {
		s.c = 1 / s.ewma
		s.frozen = true
	}
}

// AnchorWeight is the inverse-variance weight of anchor rows currently in
// force (world-model rows have weight 1): clip(1 + c·s̄², 1, WeightCap), or 1
// when Denoise is off.
func (s *State) AnchorWeight() float64 {
	if !s.cfg.Denoise {
		return 1
	}
	w := 1 + float64(s.c*s.ewma)
	return min(max(w, 1), s.cfg.WeightCap)
}
