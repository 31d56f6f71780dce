package correction

import "math"

// The trust gate (docs/anchors.md, "Trust gate"): on the window's anchor pairs, the world
// model–truth correlation ρ̂ decides whether the world model's rows may train at all. The
// non-asymptotic bound of arXiv 2505.20178 is that predictions help a labelled-sample estimate
// only when their correlation with the truth exceeds about 1/√(n−2); below it the anchors alone
// are better. IVD cannot see this case: it measures scatter around the map, not whether the map
// has a slope, so a world model that ranks nothing looks ordinary to it.
//
// The gate is derived from the window the step's rows are calibrated with (the state sealed after
// the previous step), so it needs no state of its own and a replay reproduces it; the window is
// not changed by it either (only world-model rows are masked, and only anchor rows feed the
// window and the noise estimate).

// MinGatePairs is the number of anchor pairs below which the gate stays open: with fewer the
// window cannot tell an uninformative world model from an unlucky draw.
const MinGatePairs = 10

// gateZ is the standard normal 0.975 quantile of the 95% Fisher-z interval.
const gateZ = 1.959963984540054

// gateFlatVar is the variance below which a side of the window counts as constant (scores live
// in [0, 1], so this is far below any real spread and far above rounding of a constant's mean).
const gateFlatVar = 1e-12

// Gate is the trust gate's statistic and decision for one window.
type Gate struct {
	N int // anchor pairs in the window
	// Rho is the window's (weighted) Pearson correlation of world-model and true scores; 0 when
	// either side is constant, where no slope can be learnt.
	Rho float64
	// Lo and Hi are its 95% interval by Fisher's z, tanh(atanh ρ̂ ± 1.96/√(n−3)); [−1, 1] for
	// n ≤ 3. Reported, not used to decide.
	Lo, Hi float64
	// Threshold is 1/√(n−2) when N ≥ MinGatePairs, else 0 (no decision is taken).
	Threshold float64
	// Closed: N ≥ MinGatePairs and Rho < Threshold. A closed gate masks the stream's
	// world-model rows when Config.TrustGate is on.
	Closed bool
}

// String is "open" or "closed", the form of steps.csv's gate column.
func (g Gate) String() string {
	if g.Closed {
		return "closed"
	}
	return "open"
}

// Gate evaluates the trust gate on the state's window: the decision for the step after
// SealedStep, whose rows are calibrated with this window. It is computed whether or not
// Config.TrustGate is on, so an ungated run can report what the gate would have done.
func (s *State) Gate() Gate { return gateOf(&s.win) }

// gateOf computes the gate over the window's pairs, oldest first.
//
// Weighted windows (Group.Weight ≠ 1, inverse-propensity weights) give a weighted Pearson
// correlation, each pair counting with its weight: the isotonic fit and the noise estimate weight
// pairs the same way, so the gate measures the population the map is fitted to — under a choice
// that depends on the world model, the unweighted ρ̂ would describe the over-chosen region
// instead. n stays the number of pairs, as pre-registered (Kish's effective n, smaller under
// unequal weights, would only widen the interval and raise the threshold).
func gateOf(win *fifo) Gate {
	g := Gate{N: win.len(), Lo: -1, Hi: 1}
	if g.N == 0 {
		return g
	}
	var sw, sx, sy float64
	win.each(func(p pair) {
		sw += p.w
		sx += p.w * p.x
		sy += p.w * p.y
	})
	mx, my := sx/sw, sy/sw
	var vx, vy, cxy float64
	win.each(func(p pair) {
		dx, dy := p.x-mx, p.y-my
		vx += p.w * dx * dx
		vy += p.w * dy * dy
		cxy += p.w * dx * dy
	})
	vx, vy, cxy = vx/sw, vy/sw, cxy/sw
	if vx >= gateFlatVar && vy >= gateFlatVar {
		g.Rho = max(-1, min(1, cxy/math.Sqrt(vx*vy)))
	}
	if g.N > 3 {
		z, se := math.Atanh(g.Rho), 1/math.Sqrt(float64(g.N-3))
		g.Lo, g.Hi = math.Tanh(z-gateZ*se), math.Tanh(z+gateZ*se)
	}
	if g.N >= MinGatePairs {
		g.Threshold = 1 / math.Sqrt(float64(g.N-2))
		g.Closed = g.Rho < g.Threshold
	}
	return g
}

// maskGated masks the world-model rows of one step's rows (weight 0, mask false, no reward or
// advantage), leaving their scores and calibration for the record: the anchor rows carry the
// step alone. World-model and anchor rows never share a group, so the anchors' advantages are
// untouched.
func maskGated(rows []Row) {
	for i := range rows {
		r := &rows[i]
		if r.Source != SourceWorldModel {
			continue
		}
		r.Mask, r.Used, r.Advantage, r.Weight, r.Gated = false, 0, 0, 0, true
	}
}
