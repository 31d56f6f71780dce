package correction

import "slices"

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

	weighted   int    // window pairs whose weight is not 1 (Group.Weight); 0 encodes as before weights
	totalPairs uint64 // pairs ever added
	pending    uint64 // pairs added since the last refit

	version uint64    // fit version; 0 = identity
	fitX    []float64 // breakpoints in force (nil = identity); immutable once set
	fitY    []float64

	// Inverse-variance estimator (doc.go, "Reference mode": the authors' denoise.py).
	ewma    float64 // EWMA of the per-group noise-to-signal ratio s²
	groups  uint64  // anchor groups that entered the EWMA
	skipped uint64  // anchor groups skipped (var(s) < 1e-9 or < 2 pairs)
	c       float64 // weight coefficient: w = clip(1 + c·ewma, 1, cap)
	frozen  bool

	// Chunk hashes of the window for Digest (valid only if sumsValid): set by Correct,
	// immutable once set, so a clone may share them; any change to the window clears them.
	sums      []chunkSum
	sumsValid bool

	retired bool // handed to CorrectRetire: never advanced again

	// stepGate is the trust gate that decided the step just sealed (StepGate); not encoded.
	stepGate *Gate
}

// newState returns the empty state of a (run, stream) for a validated cfg:
// nothing sealed (SealedStep −1), identity calibration, anchor weight 1.
// States come only from Corrector.NewState and DecodeState, the two ways a
// Config enters the package, and both validate it, so nothing downstream
// re-checks a field.
func newState(run, stream string, cfg Config, hash [32]byte) *State {
	s := &State{cfg: cfg, cfgHash: hash, run: run, stream: stream, sealed: -1}
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

// ConfigHash is Config().Hash(), carried by the state (and its encoding).
func (s *State) ConfigHash() [32]byte { return s.cfgHash }

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

// Breakpoints returns copies of the fitted map's breakpoints; both are nil
// while the identity map is in force.
func (s *State) Breakpoints() (x, y []float64) {
	return slices.Clone(s.fitX), slices.Clone(s.fitY)
}

// ScoreBreakpoints is Breakpoints for a map of scores: nil under the z-space
// map, whose breakpoints live in within-group standardised space and map
// advantages, not scores.
func (s *State) ScoreBreakpoints() (x, y []float64) {
	if s.cfg.Map == MapZSpace {
		return nil, nil
	}
	return s.Breakpoints()
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
	n.sums, n.sumsValid, n.retired = nil, false, false
	return &n
}
