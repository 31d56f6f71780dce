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

// observeGroup folds one anchor group's estimate into the EWMA and freezes
// c once FreezeAfter groups have been seen (reference mode). Freezing waits
// while the EWMA is 0, where 1/s̄² is undefined.
func (s *State) observeGroup(d, t []float64) {
	r, ok := noiseRatio(d, t)
	if !ok {
		s.skipped++
		return
	}
	if s.groups == 0 {
		s.ewma = r
	} else {
		alpha := 1 - math.Pow(0.5, 1/s.cfg.HalfLife)
		s.ewma = float64((1-alpha)*s.ewma) + float64(alpha*r)
	}
	s.groups++
	if s.cfg.FreezeAfter > 0 && !s.frozen && s.groups >= uint64(s.cfg.FreezeAfter) && s.ewma > 0 {
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
