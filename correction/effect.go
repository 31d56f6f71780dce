package correction

import (
	"cmp"
	"math"
	"slices"
)

// DebiasEffect says what Online Debiasing did to one sealed step's
// world-model advantages: each unmasked world-model row's advantage is
// compared with the advantage its group would have given it without the map
// (the raw predictions, same mask, same estimator). Under std-normalised
// GRPO a monotone map reaches the loss only through its curvature inside a
// group's score span and through flat stretches, so a run can read here
// whether OD moves its gradient at all.
type DebiasEffect struct {
	// Rows is the number of unmasked world-model rows compared.
	Rows int
	// Groups is the number of world-model groups with at least two unmasked rows.
	Groups int
	// Reordered counts the groups whose order or ties the map changed: two
	// rollouts that were distinct became tied, or (by rounding only, the maps
	// being monotone) swapped, or tied ones became distinct.
	Reordered int
	// Flattened counts the groups with spread in their raw advantages that
	// the map flattened to zero spread: every rollout gets the same advantage
	// (0 under GRPO), so the group stops reaching the gradient.
	Flattened int
	// MeanShift is mean |A(f(r̂)) − A(r̂)| over the Rows rows, 0 if none.
	MeanShift float64
}

// ReorderedShare is Reordered/Groups, 0 without groups.
func (e DebiasEffect) ReorderedShare() float64 {
	if e.Groups == 0 {
		return 0
	}
	return float64(e.Reordered) / float64(e.Groups)
}

// DebiasEffect computes the effect of the map on rows, the output of one
// Correct, Advance or CorrectRetire (one step of one stream, rows of a group
// adjacent, as those return them). It is a pure function of the rows and the
// corrector's estimator settings, hence of the sealed state and the step, so
// a replay reproduces it bit for bit. Anchor rows are ignored (their reward
// is the executed score, which no map touches). With Debias off, or before
// the first fit, every field but Rows and Groups is 0.
func (c *Corrector) DebiasEffect(rows []Row) DebiasEffect {
	var (
		e       DebiasEffect
		sum     float64
		vals    []float64
		mask    []bool
		raw     []float64
		order   []int
		scratch []float64
	)
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].GroupID == rows[i].GroupID {
			j++
		}
		g := rows[i:j]
		i = j
		if g[0].Source != SourceWorldModel {
			continue
		}
		vals, mask = vals[:0], mask[:0]
		n := 0
		for k := range g {
			vals = append(vals, g[k].Predicted)
			mask = append(mask, g[k].Mask)
			if g[k].Mask {
				n++
			}
		}
		if n < 2 {
			continue
		}
		raw = slices.Grow(raw[:0], len(g))[:len(g)]
		if c.cfg.Mode == ModeReference {
			scratch = groupAdvantagesNumpy(vals, mask, raw, c.cfg.Advantage, c.cfg.Eps, c.cfg.DDOF, slices.Grow(scratch[:0], 2*len(g)))
		} else {
			groupAdvantages(vals, mask, raw, c.cfg.Advantage, c.cfg.Eps, c.cfg.DDOF)
		}
		e.Groups++
		e.Rows += n
		order = order[:0]
		for k := range g {
			if g[k].Mask {
				sum += math.Abs(g[k].Advantage - raw[k])
				order = append(order, k)
			}
		}
		// Sorted by raw advantage (index breaks ties), the map changed order or
		// ties iff some neighbours compare differently after it.
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(raw[a], raw[b]) })
		rawSpread, mapSpread := false, false
		changed := false
		for k := 1; k < len(order); k++ {
			a, b := order[k-1], order[k]
			rc, mc := cmp.Compare(raw[a], raw[b]), cmp.Compare(g[a].Advantage, g[b].Advantage)
			changed = changed || rc != mc
			rawSpread = rawSpread || rc != 0
			mapSpread = mapSpread || g[a].Advantage != g[order[0]].Advantage || g[b].Advantage != g[order[0]].Advantage
		}
		if changed {
			e.Reordered++
		}
		if rawSpread && !mapSpread {
			e.Flattened++
		}
	}
	if e.Rows > 0 {
		e.MeanShift = sum / float64(e.Rows)
	}
	return e
}
