package correction

import (
	"math"
	"slices"
)

// State is the calibration state of one (run, stream) sealed after a step:
// the anchor-pair window, the fit in force, and the noise estimator. A State
// is a value owned by one goroutine at a time; Correct never mutates its
// input state, so sealed states can be kept, shared read-only, and replayed.
type State struct {
	cfg     Config
	cfgHash [32]byte
	run     string
	stream  string
	sealed  int64

	// Window: win holds at most cfg.Window pairs in arrival order. sorted is
	// the same multiset ordered by (x, y), kept only in ModeDefault so an
	// exact refit needs no sort.
	win         fifo
	sorted      []pair
	spare       []pair // reusable merge target, only ever owned by this State
	sortedOwned bool   // false when sorted is shared with the state it was cloned from

	totalPairs uint64 // pairs ever added
	pending    uint64 // pairs added since the last refit

	version uint64    // fit version; 0 = identity
	fitX    []float64 // breakpoints in force (nil = identity); immutable once set
	fitY    []float64

	// Inverse-variance estimator (DESIGN §2, Denoise).
	ewma    float64 // EWMA of the per-group noise-to-signal ratio s²
	groups  uint64  // anchor groups that entered the EWMA
	skipped uint64  // anchor groups skipped (var(s) < 1e-9 or < 2 pairs)
	c       float64 // weight coefficient: w = clip(1 + c·ewma, 1, cap)
	frozen  bool
}

// NewState returns the empty state of a (run, stream): nothing sealed
// (SealedStep −1), identity calibration, anchor weight 1. The first step it
// accepts is step 0.
func NewState(run, stream string, cfg Config) *State {
	s := &State{cfg: cfg, cfgHash: cfg.Hash(), run: run, stream: stream, sealed: -1}
	if cfg.FreezeAfter == 0 {
		s.c = 1
	}
	return s
}

// Run is the run id the state belongs to.
func (s *State) Run() string { return s.run }

// Stream is the stream id the state belongs to.
func (s *State) Stream() string { return s.stream }

// Config is the configuration the state was created with.
func (s *State) Config() Config { return s.cfg }

// SealedStep is the last step folded into the state, −1 if none.
func (s *State) SealedStep() int64 { return s.sealed }

// FitVersion counts refits; 0 means the identity map is in force.
func (s *State) FitVersion() uint64 { return s.version }

// Pairs is the number of anchor pairs in the window.
func (s *State) Pairs() int { return s.win.len() }

// TotalPairs is the number of anchor pairs ever added to the window.
func (s *State) TotalPairs() uint64 { return s.totalPairs }

// NoiseRatio is the smoothed noise-to-signal ratio s̄² = σ²_ξ/σ²_true and
// the number of anchor groups that entered it.
func (s *State) NoiseRatio() (ratio float64, groups uint64) { return s.ewma, s.groups }

// Calibrate applies the map currently in force: identity until the first
// fit (or when Debias is off), else the fitted monotone map.
func (s *State) Calibrate(x float64) float64 {
	if s.fitX == nil {
		return x
	}
	return interpolate(s.fitX, s.fitY, x)
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

// Breakpoints returns copies of the fitted map's breakpoints; both are nil
// while the identity map is in force.
func (s *State) Breakpoints() (x, y []float64) {
	return slices.Clone(s.fitX), slices.Clone(s.fitY)
}

// clone returns a state that can be advanced without touching s. The FIFO
// shares its chunks copy-on-write; sorted is shared until the next merge,
// which always writes a buffer owned by the clone (Correct copies it if no
// merge happened, so no two states share a sorted buffer that one of them
// may recycle); the fit is immutable.
func (s *State) clone() *State {
	n := *s
	n.win = s.win.clone()
	n.spare = nil
	n.sortedOwned = false
	return &n
}

// addPairs appends pairs in the given (canonical) order, evicting the
// oldest once the window is full, and keeps the sorted view in step with a
// single O(W + k log k) merge.
func (s *State) addPairs(ps []pair) {
	if len(ps) == 0 {
		return
	}
	W := s.cfg.Window
	var evicted []pair
	for _, p := range ps {
		if s.win.len() == W {
			e := s.win.pop()
			if s.cfg.Mode == ModeDefault {
				evicted = append(evicted, e)
			}
		}
		s.win.push(p)
	}
	s.totalPairs += uint64(len(ps))
	s.pending += uint64(len(ps))
	if s.cfg.Mode != ModeDefault {
		return
	}
	added := slices.Clone(ps)
	slices.SortFunc(added, cmpPair)
	slices.SortFunc(evicted, cmpPair)
	out := s.spare[:0]
	if n := s.win.len(); cap(out) < n {
		out = make([]pair, 0, max(n, min(W, 2*n)))
	}
	if len(ps) <= W {
		out = spliceSorted(out, s.sorted, added, evicted)
	} else {
		out = mergeSorted(out, s.sorted, added, evicted)
	}
	if s.sortedOwned {
		s.spare = s.sorted
	}
	s.sorted = out
	s.sortedOwned = true
}

// spliceSorted writes old − evicted + added (all sorted by (x, y)) into out
// with binary searches and block copies: k insertions and evictions cost
// O(k log W) comparisons plus one memmove of the window, several times
// faster than an element-wise merge. Every evicted pair must occur in old,
// which holds when no more than W pairs are added at once; if a search
// disagrees it falls back to mergeSorted.
func spliceSorted(out, old, added, evicted []pair) []pair {
	var evIdx []int
	for e := 0; e < len(evicted); {
		f := e
		for f < len(evicted) && evicted[f] == evicted[e] {
			f++
		}
		lo, _ := slices.BinarySearchFunc(old, evicted[e], cmpPair)
		for k := range f - e {
			if lo+k >= len(old) || old[lo+k] != evicted[e] {
				return mergeSorted(out, old, added, evicted)
			}
			evIdx = append(evIdx, lo+k)
		}
		e = f
	}
	pos, a, e := 0, 0, 0
	for a < len(added) || e < len(evIdx) {
		ins := len(old)
		if a < len(added) {
			// Insert after all equal elements (upper bound).
			ins, _ = slices.BinarySearchFunc(old[pos:], added[a], func(p, t pair) int {
				if cmpPair(p, t) <= 0 {
					return -1
				}
				return 1
			})
			ins += pos
		}
		if e < len(evIdx) && evIdx[e] < ins {
			out = append(out, old[pos:evIdx[e]]...)
			pos = evIdx[e] + 1
			e++
			continue
		}
		out = append(out, old[pos:ins]...)
		out = append(out, added[a])
		pos = ins
		a++
	}
	return append(out, old[pos:]...)
}

// mergeSorted is the element-wise merge of old ∪ added dropping one
// occurrence of each evicted pair; it handles evictions of pairs added in
// the same call. Equal pairs are identical, so which occurrence is dropped
// is moot.
func mergeSorted(out, old, added, evicted []pair) []pair {
	out = out[:0]
	i, j, e := 0, 0, 0
	for i < len(old) || j < len(added) {
		var p pair
		if j >= len(added) || (i < len(old) && cmpPair(old[i], added[j]) <= 0) {
			p = old[i]
			i++
		} else {
			p = added[j]
			j++
		}
		if e < len(evicted) && cmpPair(p, evicted[e]) == 0 {
			e++
			continue
		}
		out = append(out, p)
	}
	return out
}

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
