package correction

import "math"

// maybeRefit refits when the window has MinPairs pairs and RefitEvery new
// pairs (or, for RefitEvery = 0, any new pair) arrived since the last fit.
// Pending pairs accumulate from the start, so the first fit happens as soon
// as MinPairs is reached — as in the reference code.
func (s *State) maybeRefit() error {
	if !s.cfg.Debias || s.pending == 0 || s.win.len() < s.cfg.MinPairs {
		return nil
	}
	if s.cfg.RefitEvery > 0 && s.pending < uint64(s.cfg.RefitEvery) {
		return nil
	}
	var (
		bx, by []float64
		err    error
	)
	if s.cfg.Mode == ModeReference {
		bx, by, err = fitBinned(&s.win, s.cfg.Bins)
	} else {
		bx, by, err = fitSortedPairs(s.sorted)
	}
	if err != nil {
		return err
	}
	s.fitX, s.fitY = bx, by
	s.version++
	s.pending = 0
	return nil
}

// fitBinned is the reference fit: pairs are binned by x into B equal-width
// bins on [0,1] (index min(floor(x·B), B−1), x clamped to [0,1]), and a
// weighted PAV (weights = bin counts) runs on the means of the non-empty
// bins placed at the bin centres (k+0.5)/B. Evaluation interpolates between
// those centres and is flat beyond the outer ones.
//
// The window is read oldest first, the order Encode writes, so the bin sums
// — and hence the fit — depend only on the window's content.
func fitBinned(win *fifo, bins int) (bx, by []float64, err error) {
	cnt := make([]float64, bins)
	sum := make([]float64, bins)
	win.each(func(p pair) {
		k := binIndex(p.x, bins)
		cnt[k]++
		sum[k] += p.y
	})
	sc := getScratch(bins)
	defer putScratch(sc)
	for k := range bins {
		if cnt[k] > 0 {
			centre := (float64(k) + 0.5) / float64(bins)
			sc.add(centre, cnt[k], sum[k]/cnt[k])
		}
	}
	return sc.pava()
}

func binIndex(x float64, bins int) int {
	x = min(max(x, 0), 1)
	k := int(math.Floor(x * float64(bins)))
	return min(k, bins-1)
}

// Calibrate applies the map currently in force: identity until the first
// fit (or when Debias is off), else the fitted monotone map.
func (s *State) Calibrate(x float64) float64 {
	if s.fitX == nil {
		return x
	}
	return interpolate(s.fitX, s.fitY, x)
}
