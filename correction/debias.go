package correction

import "sort"

// refitDue reports whether the map is to be refitted now: OD is on, the
// window has MinPairs pairs, and RefitEvery new pairs (for RefitEvery = 0,
// any new pair) arrived since the last successful fit. Pending pairs count
// from the start, so the first fit happens as soon as MinPairs is reached,
// as in the authors' OnlineDebiaser.
func (s *State) refitDue() bool {
	if !s.cfg.Debias || s.pending == 0 || s.win.len() < s.cfg.MinPairs {
		return false
	}
	return s.cfg.RefitEvery == 0 || s.pending >= uint64(s.cfg.RefitEvery)
}

// maybeRefit is the default mode's refit at a sealed step: the exact
// isotonic (centred isotonic, z-space) fit of the whole window, if due. A
// z-space window that cannot define a map yet keeps the old one and its
// pending count, so the fit is retried at the next step.
func (s *State) maybeRefit() error {
	if !s.refitDue() {
		return nil
	}
	bx, by, err := s.fitWindow()
	if err != nil || bx == nil {
		return err
	}
	s.setFit(bx, by)
	return nil
}

// maybeRefitReference is the reference refit after one pushed pair. A fit
// that is not possible (fewer than two populated bins) leaves the old map
// and the pending count alone, so it is retried at the next pair, as
// OnlineDebiaser.push does.
func (s *State) maybeRefitReference() {
	if !s.refitDue() {
		return
	}
	if bx, by := fitReference(&s.win, s.cfg.Bins); bx != nil {
		s.setFit(bx, by)
	}
}

func (s *State) setFit(bx, by []float64) {
	s.fitX, s.fitY = bx, by
	s.version++
	s.pending = 0
}

// fitReference is the authors' fit_calibration: pairs are binned with
// np.digitize(x, linspace(0, 1, bins+1)[1:-1]) — the inner edges are
// i·(1/bins) as numpy rounds them, so 0.3 lies below the fourth edge of 10
// bins (0.30000000000000004) and falls in bin 2 — and every populated bin
// gives one breakpoint at the mean x of its pairs with the mean y; a
// weighted PAV (weights = bin counts) pools violating neighbours. Fewer than
// two populated bins give no map (nil). Means are numpy's pairwise sums
// over the window read oldest first, so the fit depends on the window's
// content and order only.
func fitReference(win *fifo, bins int) (bx, by []float64) {
	n := win.len()
	if n < 2 {
		return nil, nil
	}
	edges := make([]float64, bins-1)
	step := 1.0 / float64(bins)
	for i := range edges {
		edges[i] = float64(i+1) * step
	}
	idx := make([]int32, 0, n)
	off := make([]int, bins+1)
	win.each(func(p pair) {
		// np.digitize with right=False: the number of edges <= x.
		k := sort.Search(len(edges), func(i int) bool { return edges[i] > p.x })
		idx = append(idx, int32(k))
		off[k+1]++
	})
	for k := range bins {
		off[k+1] += off[k]
	}
	xs, ys := make([]float64, n), make([]float64, n)
	pos := append([]int(nil), off[:bins]...)
	i := 0
	win.each(func(p pair) {
		k := idx[i]
		i++
		xs[pos[k]], ys[pos[k]] = p.x, p.y
		pos[k]++
	})
	var cx, cy, cw []float64
	for k := range bins {
		if off[k+1] == off[k] {
			continue
		}
		cx = append(cx, npMean(xs[off[k]:off[k+1]]))
		cy = append(cy, npMean(ys[off[k]:off[k+1]]))
		cw = append(cw, float64(off[k+1]-off[k]))
	}
	if len(cx) < 2 {
		return nil, nil
	}
	val, wt := make([]float64, 0, len(cy)), make([]float64, 0, len(cy))
	cnt := make([]int, 0, len(cy))
	for k := range cy {
		val, wt, cnt = append(val, cy[k]), append(wt, cw[k]), append(cnt, 1)
		for m := len(val); m > 1 && val[m-2] > val[m-1]; m = len(val) {
			v1, w1, c1 := val[m-2], wt[m-2], cnt[m-2]
			v2, w2, c2 := val[m-1], wt[m-1], cnt[m-1]
			nw := w1 + w2
			val, wt, cnt = val[:m-1], wt[:m-1], cnt[:m-1]
			val[m-2] = (float64(v1*w1) + float64(v2*w2)) / nw
			wt[m-2], cnt[m-2] = nw, c1+c2
		}
	}
	fy := make([]float64, 0, len(cx))
	for b, v := range val {
		for range cnt[b] {
			fy = append(fy, v)
		}
	}
	return cx, fy
}

// Calibrate applies the map currently in force: identity until the first
// fit (or when Debias is off), else the fitted monotone map (np.interp of
// the bin breakpoints in reference mode). The z-space map acts on
// advantages, not scores, so under it Calibrate is the identity.
func (s *State) Calibrate(x float64) float64 {
	switch {
	case s.fitX == nil, s.cfg.Map == MapZSpace:
		return x
	case s.cfg.Mode == ModeReference:
		return npInterp(s.fitX, s.fitY, x)
	}
	return interpolate(s.fitX, s.fitY, x)
}
