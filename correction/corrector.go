package correction

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Errors returned by Corrector.Correct; callers branch on them with errors.Is.
var (
	// ErrOutOfOrder: the step is not the one right after the state's sealed step.
	ErrOutOfOrder = errors.New("correction: step out of order")
	// ErrConfigMismatch: the state was built with a different Config.
	ErrConfigMismatch = errors.New("correction: state config differs from corrector config")
	// ErrStreamMismatch: the step's (run, stream) is not the state's.
	ErrStreamMismatch = errors.New("correction: step run/stream differs from state")
	// ErrInvalidStep: malformed step input; the message names the group/rollout.
	ErrInvalidStep = errors.New("correction: invalid step")
	// ErrNilState: Correct was given a nil previous state.
	ErrNilState = errors.New("correction: nil state")
	// ErrRetired: the state was handed to CorrectRetire, which took its buffers for advancing.
	ErrRetired = errors.New("correction: state retired by CorrectRetire")
)

// Reward is one score or its absence. OK=false means missing or failed
// (timeout, error, invalid): the rollout is masked, never scored as 0.
type Reward struct {
	Score float64
	OK    bool
}

// Rollout carries the world-model score and, in anchor groups, the executed
// score of one rollout.
type Rollout struct {
	ID        string
	Predicted Reward
	Executed  Reward // only meaningful in anchor groups
	// Stale excludes the rollout from its group's advantage statistics like
	// a missing reward (its row is masked with Row.Stale set), while its
	// scores stay in the row and its anchor pair still enters the window and
	// the noise estimate: staleness is about the policy that sampled it, not
	// about the world model the calibration measures.
	Stale bool
}

// Group is one GRPO group; Anchor groups were executed for real.
type Group struct {
	ID     string
	Anchor bool
	// Weight is an anchor group's inverse-propensity weight 1/π_g when a policy chose it with
	// probability π_g (docs/anchors.md); its pairs enter the isotonic fit with this weight, so
	// the calibration stays unbiased under a choice that depends on the world model. 0 means 1,
	// today's random choice, whose arithmetic is unchanged. Only the default mode's isotonic and
	// centred maps take weights; a window holding weights encodes as version 3 (encode.go).
	Weight   float64
	Rollouts []Rollout
}

// pairWeight is the weight g's anchor pairs enter the window with.
func (g *Group) pairWeight() float64 {
	if g.Weight == 0 {
		return 1
	}
	return g.Weight
}

// Step is one complete training step of one (run, stream).
type Step struct {
	Run, Stream string
	Step        int64
	Groups      []Group
}

// Source says where a row's used reward came from.
type Source uint8

const (
	SourceAnchor Source = iota
	SourceWorldModel
)

func (s Source) String() string { return enumName(s, "Source", "anchor", "world_model") }

// Row is the corrected output for one rollout.
type Row struct {
	Run, Stream        string
	Step               int64
	GroupID, RolloutID string
	Source             Source
	Predicted          float64 // raw world-model score (0 if !PredictedOK)
	PredictedOK        bool
	Calibrated         float64 // f̂(Predicted) under the state sealed after step−1 (0 if !PredictedOK)
	Executed           float64 // anchor rows only (0 otherwise)
	ExecutedOK         bool
	Used               float64 // reward that entered the advantage (0 when masked)
	Advantage          float64 // 0 when masked
	Weight             float64 // anchor weight for anchor rows, 1 for world-model rows, 0 when masked
	Mask               bool
	Stale              bool   // masked because the rollout was Stale (Mask is then false)
	Gated              bool   // world-model row masked because the trust gate was closed (Config.TrustGate)
	CalibrationVersion uint64 // FitVersion of the map that produced Calibrated
}

// Corrector turns complete steps into corrected rows. It holds only its
// config and is safe for concurrent use.
type Corrector struct {
	cfg  Config
	hash [32]byte
}

// New validates cfg and returns a Corrector for it. This is where a Config
// enters the package (DecodeState is the other door, for configs read back
// from a snapshot); every later use trusts it.
func New(cfg Config) (*Corrector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Corrector{cfg: cfg, hash: cfg.Hash()}, nil
}

// Config returns the corrector's configuration.
func (c *Corrector) Config() Config { return c.cfg }

// Hash is Config().Hash(), computed once by New.
func (c *Corrector) Hash() [32]byte { return c.hash }

// NewState returns the empty state of a (run, stream) under the corrector's
// config: nothing sealed (SealedStep −1), identity calibration, anchor
// weight 1. The first step it accepts is step 0.
func (c *Corrector) NewState(run, stream string) *State { return newState(run, stream, c.cfg, c.hash) }

// Correct computes the rows of step from prev, the state sealed after
// step.Step−1, and returns them in canonical order together with the new
// sealed state. prev is not mutated. In the default mode the canonical order
// is group id, then rollout id (byte-wise), and neither output depends on
// the order of groups or rollouts in step. In reference mode groups are
// processed in the order of step.Groups, which must be the step manifest's
// group order (the authors' loop is sequential over groups, see doc.go),
// and rollouts within a group in rollout-id order; rows come back in that
// order.
func (c *Corrector) Correct(prev *State, step Step) ([]Row, *State, error) {
	if prev == nil {
		return nil, nil, ErrNilState
	}
	if err := c.check(prev, step); err != nil {
		return nil, nil, err
	}
	next := prev.clone()
	rows, err := c.Advance(next, step, nil)
	if err != nil {
		return nil, nil, err
	}
	if !next.sortedOwned && next.sorted != nil {
		// No pairs were added, so next still shares prev's sorted view; an
		// in-place Advance of prev may later recycle that buffer.
		next.sorted = slices.Clone(next.sorted)
		next.sortedOwned = true
	}
	next.carrySums(prev)
	return rows, next, nil
}

// CorrectRetire is Correct for a caller that never advances prev again, like the correction
// consumer, which keeps only the newest state of a stream: next takes over prev's buffers for the
// sorted window and the window's last chunk, so a chain of steps stops copying window-sized
// buffers per step; the rows are appended to dst, as Advance does. prev stays readable (Encode,
// EncodeHead, Digest, its window, fit and Calibrate), but Correct, Advance and CorrectRetire of
// prev return ErrRetired from then on. On error prev is not retired.
func (c *Corrector) CorrectRetire(prev *State, step Step, dst []Row) ([]Row, *State, error) {
	if prev == nil {
		return dst, nil, ErrNilState
	}
	if err := c.check(prev, step); err != nil {
		return dst, nil, err
	}
	next := prev.clone()
	giveBack := prev.lendBuffers(next)
	rows, err := c.Advance(next, step, dst)
	if err != nil {
		giveBack()
		return rows, nil, err
	}
	prev.retireInto(next)
	next.carrySums(prev)
	return rows, next, nil
}

// Buffer hand-over of CorrectRetire. Each buffer has one owner, the state that may write it; a
// clone starts owning none (clone). Before next advances, s lends it the two buffers only the
// newest state may write; after, s gives up the rest and is retired:
//
//	buffer                 before Advance (lendBuffers)   after Advance (retireInto)
//	window's last chunk    s → next                        next
//	spare (merge target)   s → next                        next, or s's old sorted view
//	sorted view            s (next shares it)              next (taken over or copied); s none

// lendBuffers gives next, a clone of s, s's merge target and the window's last chunk: next
// appends to that chunk past the pairs s reads, and s never reads its spare. The returned func
// gives the chunk back when Advance fails (what next wrote there, s overwrites when it appends).
func (s *State) lendBuffers(next *State) (giveBack func()) {
	next.spare = s.spare
	owned := s.win.tailOwned
	next.win.tailOwned, s.win.tailOwned = owned, false
	return func() { s.win.tailOwned = owned }
}

// retireInto ends the hand-over once next advanced: next owns its sorted view and at most a
// spare, s owns no buffer and is retired.
func (s *State) retireInto(next *State) {
	switch {
	case next.sortedOwned && s.sortedOwned && next.Config().Mode == ModeDefault:
		// Merged into a buffer of its own: s's sorted view is next's spare for the next step.
		next.spare = s.sorted
	case next.sortedOwned:
		next.spare = nil
	case next.sorted != nil && s.sortedOwned:
		// No pairs were added: next shares s's sorted view, which s gives up.
		next.sortedOwned, next.spare = true, nil
	case next.sorted != nil:
		next.sorted, next.sortedOwned, next.spare = slices.Clone(next.sorted), true, nil
	}
	s.sorted, s.spare, s.sortedOwned, s.retired = nil, nil, false, true
}

// carrySums sets s's chunk hashes from prev's, the state s was made from by appending pairs:
// the chunks that did not change keep their hashes.
func (s *State) carrySums(prev *State) {
	s.sums, s.sumsValid = prev.sums, prev.sumsValid
	if !prev.sumsValid || s.totalPairs != prev.totalPairs {
		var from []chunkSum
		if prev.sumsValid {
			from = prev.sums
		}
		s.sums, s.sumsValid = s.chunkSums(from), true
	}
}

// Advance is Correct without the copy: it folds step into st in place and
// appends the rows to dst. It is for simulation loops that do not keep old
// states. On error st is unchanged.
func (c *Corrector) Advance(st *State, step Step, dst []Row) ([]Row, error) {
	if st == nil {
		return dst, ErrNilState
	}
	if err := c.check(st, step); err != nil {
		return dst, err
	}
	gorder, err := canonicalOrder(step)
	if err != nil {
		return dst, err
	}
	if err := c.checkWeights(step); err != nil {
		return dst, err
	}
	if c.cfg.Mode == ModeReference {
		return c.advanceReference(st, step, dst), nil
	}
	gated := c.decideGate(st)
	total := 0
	for _, g := range step.Groups {
		total += len(g.Rollouts)
	}
	dst, base := slices.Grow(dst, total), len(dst)
	weight := st.AnchorWeight()
	var (
		vals    []float64
		mask    []bool
		adv     []float64
		rorder  []int
		anchorN int
		gws     []float64 // pair weight per group with rows, canonical order
	)
	for _, gi := range gorder {
		g := &step.Groups[gi]
		if len(g.Rollouts) > 0 {
			// One entry per run of rows (eachGroup): a group without rollouts has none.
			gws = append(gws, g.pairWeight())
		}
		rorder = rolloutOrder(g, rorder[:0])
		start := len(dst)
		vals, mask = vals[:0], mask[:0]
		for _, ri := range rorder {
			r := &g.Rollouts[ri]
			row := inputRow(&step, g, r)
			row.CalibrationVersion = st.version
			if r.Predicted.OK {
				row.Calibrated = st.Calibrate(r.Predicted.Score)
			}
			used, ok := row.Calibrated, row.PredictedOK
			if g.Anchor {
				used, ok = row.Executed, row.ExecutedOK
			}
			vals = append(vals, used)
			mask = append(mask, ok && !r.Stale)
			dst = append(dst, row)
		}
		adv = slices.Grow(adv[:0], len(vals))[:len(vals)]
		groupAdvantages(vals, mask, adv, c.cfg.Advantage, c.cfg.Eps, c.cfg.DDOF)
		if c.cfg.Map == MapZSpace && !g.Anchor {
			st.applyZSpace(vals, mask, adv)
		}
		w := 1.0
		if g.Anchor {
			w, anchorN = weight, anchorN+1
		}
		setAdvantages(dst[start:], vals, mask, adv, w)
	}
	if err := c.seal(st, step.Step, dst[base:], gws, anchorN, gated); err != nil {
		return dst[:base], err
	}
	return dst, nil
}

// decideGate sets the step's trust gate on st (nil when the gate is off) and reports whether it
// is closed. It is decided on the window the rows are calibrated with, before that window takes
// the step's pairs.
func (c *Corrector) decideGate(st *State) bool {
	st.stepGate = nil
	if !c.cfg.TrustGate {
		return false
	}
	g := st.Gate()
	st.stepGate = &g
	return g.Closed
}

// seal finishes a step whose rows (in canonical order; gws: the pair weight of each group with
// rows) have their group advantages: it masks them when the gate is closed, applies the
// inverse-propensity normalisation, folds the anchor groups' pairs into st, refits when due and
// marks the step sealed.
func (c *Corrector) seal(st *State, step int64, rows []Row, gws []float64, anchorN int, gated bool) error {
	if gated {
		maskGated(rows)
	}
	norm := ipwNorm(rows, gws)
	if norm != 0 {
		reweightAnchorRows(rows, gws, norm)
	}
	if anchorN > 0 {
		c.sealAnchors(st, rows, gws, norm)
	}
	if err := st.maybeRefit(); err != nil {
		// Unreachable: validated scores are bounded, so sums stay finite.
		return fmt.Errorf("correction: refit after step %d: %w", step, err)
	}
	st.sealed = step
	return nil
}

// checkWeights refuses inverse-propensity weights where they are not implemented.
func (c *Corrector) checkWeights(step Step) error {
	if c.cfg.Mode != ModeReference && c.cfg.Map != MapZSpace {
		return nil
	}
	for _, g := range step.Groups {
		if g.Anchor && g.pairWeight() != 1 {
			return fmt.Errorf("%w: group %q: weight %v: inverse-propensity weights are implemented for the default mode's isotonic and centred maps only", ErrInvalidStep, g.ID, g.Weight)
		}
	}
	return nil
}

// setAdvantages fills in a group's rows the mask, the values the advantages used (vals) and the
// advantages, with the group's row weight.
func setAdvantages(rows []Row, vals []float64, mask []bool, adv []float64, weight float64) {
	for k := range vals {
		row := &rows[k]
		row.Mask = mask[k]
		if row.Mask {
			row.Used, row.Advantage, row.Weight = vals[k], adv[k], weight
		}
	}
}

// sealAnchors folds the anchor groups of one step's rows (canonical order; gws the pair weight
// per group) into the estimator and the window, using the calibration the rows were computed
// with.
func (c *Corrector) sealAnchors(st *State, rows []Row, gws []float64, norm float64) {
	zspace := c.cfg.Map == MapZSpace
	var newP []pair
	var dn, tn, pn []float64
	for i, gk := 0, 0; i < len(rows); gk++ {
		gw := gws[gk]
		j := i
		for j < len(rows) && rows[j].GroupID == rows[i].GroupID {
			j++
		}
		if rows[i].Source == SourceAnchor {
			dn, tn, pn = dn[:0], tn[:0], pn[:0]
			for k := i; k < j; k++ {
				r := &rows[k]
				if r.PredictedOK && r.ExecutedOK {
					if !zspace {
						newP = append(newP, pair{r.Predicted, r.Executed, gw})
					}
					pn = append(pn, r.Predicted)
					dn = append(dn, r.Calibrated)
					tn = append(tn, r.Executed)
				}
			}
			if zspace {
				// The window holds standardised pairs (zspace.go).
				newP = zPairs(newP, pn, tn, c.cfg.Eps, c.cfg.DDOF)
			}
			if c.cfg.Denoise {
				rel := 1.0
				if norm != 0 {
					rel = gw / norm
				}
				st.observeGroup(dn, tn, rel)
			}
		}
		i = j
	}
	st.addPairs(newP)
}

// inputRow is rollout r of group g as the step's input gives it: its identity and source, and
// the predicted and (in an anchor group) executed scores. Calibration, mask and advantage are
// the mode's to fill in.
func inputRow(step *Step, g *Group, r *Rollout) Row {
	row := Row{
		Run: step.Run, Stream: step.Stream, Step: step.Step,
		GroupID: g.ID, RolloutID: r.ID,
		Source:      SourceWorldModel,
		PredictedOK: r.Predicted.OK,
		Stale:       r.Stale,
	}
	if r.Predicted.OK {
		row.Predicted = r.Predicted.Score
	}
	if g.Anchor {
		row.Source = SourceAnchor
		row.ExecutedOK = r.Executed.OK
		if r.Executed.OK {
			row.Executed = r.Executed.Score
		}
	}
	return row
}

func (c *Corrector) check(st *State, step Step) error {
	if st.retired {
		return ErrRetired
	}
	if st.cfgHash != c.hash {
		return ErrConfigMismatch
	}
	if step.Run != st.run || step.Stream != st.stream {
		return fmt.Errorf("%w: step is %q/%q, state is %q/%q", ErrStreamMismatch, step.Run, step.Stream, st.run, st.stream)
	}
	if len(step.Run) > maxIDLen || len(step.Stream) > maxIDLen {
		return fmt.Errorf("%w: run or stream id longer than %d bytes", ErrInvalidStep, maxIDLen)
	}
	if step.Step != st.sealed+1 {
		return fmt.Errorf("%w: got step %d, state sealed after %d", ErrOutOfOrder, step.Step, st.sealed)
	}
	return nil
}

// canonicalOrder validates step and returns group indices sorted by id.
func canonicalOrder(step Step) ([]int, error) {
	order := make([]int, len(step.Groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(step.Groups[a].ID, step.Groups[b].ID) })
	for k, gi := range order {
		g := &step.Groups[gi]
		if g.ID == "" {
			return nil, fmt.Errorf("%w: group at index %d has an empty id", ErrInvalidStep, gi)
		}
		if k > 0 && step.Groups[order[k-1]].ID == g.ID {
			return nil, fmt.Errorf("%w: duplicate group id %q", ErrInvalidStep, g.ID)
		}
		if !finite(g.Weight) || g.Weight < 0 || g.Weight > maxWeight {
			return nil, fmt.Errorf("%w: group %q: weight %v not in [0, %g]", ErrInvalidStep, g.ID, g.Weight, maxWeight)
		}
		for ri := range g.Rollouts {
			r := &g.Rollouts[ri]
			if r.ID == "" {
				return nil, fmt.Errorf("%w: group %q: rollout at index %d has an empty id", ErrInvalidStep, g.ID, ri)
			}
			if r.Predicted.OK && !validScore(r.Predicted.Score) {
				return nil, fmt.Errorf("%w: group %q rollout %q: predicted score %v is not finite or exceeds ±%g", ErrInvalidStep, g.ID, r.ID, r.Predicted.Score, maxScore)
			}
			if g.Anchor && r.Executed.OK && !validScore(r.Executed.Score) {
				return nil, fmt.Errorf("%w: group %q rollout %q: executed score %v is not finite or exceeds ±%g", ErrInvalidStep, g.ID, r.ID, r.Executed.Score, maxScore)
			}
		}
	}
	var ro []int
	for _, gi := range order {
		g := &step.Groups[gi]
		ro = rolloutOrder(g, ro[:0])
		for k := 1; k < len(ro); k++ {
			if g.Rollouts[ro[k]].ID == g.Rollouts[ro[k-1]].ID {
				return nil, fmt.Errorf("%w: group %q: duplicate rollout id %q", ErrInvalidStep, g.ID, g.Rollouts[ro[k]].ID)
			}
		}
	}
	return order, nil
}

// maxWeight bounds a group's inverse-propensity weight (a propensity ≥ 1e-6),
// so weighted window sums stay finite like unit ones.
const maxWeight = 1e6

// maxScore bounds accepted scores. Scores are meant to lie in [0,1]; the
// bound only guarantees that window sums can never overflow, so a refit
// cannot fail after validation.
const maxScore = 1e12

func validScore(v float64) bool { return finite(v) && v >= -maxScore && v <= maxScore }

func rolloutOrder(g *Group, buf []int) []int {
	for i := range g.Rollouts {
		buf = append(buf, i)
	}
	slices.SortFunc(buf, func(a, b int) int { return cmp.Compare(g.Rollouts[a].ID, g.Rollouts[b].ID) })
	return buf
}
