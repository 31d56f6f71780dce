package correction

// advanceReference is the authors' CorrectionLoop.step (wmrl/loop.py) on a
// validated step. Groups are taken in the order of step.Groups (the
// manifest's order), rollouts in rollout-id order. For an anchor group every
// (predicted, executed) pair with both scores is pushed into the window one
// at a time, each push possibly refitting the map; the group's calibrated
// scores and its noise estimate are then taken under the map after its
// pushes. A world-model group is calibrated with the map in force when it is
// reached, which includes refits triggered earlier in the same step. Only
// when every group was seen are the advantages formed, and anchor rows carry
// the anchor weight after the step's last observation.
//
// The result is still a function of the state sealed after the previous
// step and of the step's records in canonical order, so replays and
// restarts reproduce it.
func (c *Corrector) advanceReference(st *State, step Step, dst []Row) []Row {
	type span struct {
		start, end int
		anchor     bool
	}
	spans := make([]span, 0, len(step.Groups))
	var (
		rorder  []int
		d, t    []float64
		vals    []float64
		mask    []bool
		adv     []float64
		scratch []float64
	)
	for gi := range step.Groups {
		g := &step.Groups[gi]
		rorder = rolloutOrder(g, rorder[:0])
		start := len(dst)
		for _, ri := range rorder {
			dst = append(dst, inputRow(&step, g, &g.Rollouts[ri]))
		}
		rows := dst[start:]
		if g.Anchor {
			for k := range rows {
				if r := &rows[k]; r.PredictedOK && r.ExecutedOK {
					st.pushReference(unitPair(r.Predicted, r.Executed))
				}
			}
		}
		d, t = d[:0], t[:0]
		for k := range rows {
			r := &rows[k]
			r.CalibrationVersion = st.version
			if r.PredictedOK {
				r.Calibrated = st.Calibrate(r.Predicted)
			}
			if g.Anchor && r.PredictedOK && r.ExecutedOK {
				d, t = append(d, r.Calibrated), append(t, r.Executed)
			}
		}
		if len(d) > 0 && c.cfg.Denoise {
			st.observeGroup(d, t, 1)
		}
		spans = append(spans, span{start, len(dst), g.Anchor})
	}
	weight := st.AnchorWeight()
	for _, sp := range spans {
		rows := dst[sp.start:sp.end]
		vals, mask = vals[:0], mask[:0]
		for k := range rows {
			r := &rows[k]
			if sp.anchor {
				vals, mask = append(vals, r.Executed), append(mask, r.ExecutedOK && !r.Stale)
			} else {
				vals, mask = append(vals, r.Calibrated), append(mask, r.PredictedOK && !r.Stale)
			}
		}
		adv = append(adv[:0], vals...)
		scratch = groupAdvantagesNumpy(vals, mask, adv, c.cfg.Advantage, c.cfg.Eps, c.cfg.DDOF, scratch)
		for k := range rows {
			r := &rows[k]
			r.Mask = mask[k]
			if !r.Mask {
				continue
			}
			r.Used, r.Advantage, r.Weight = vals[k], adv[k], 1
			if sp.anchor {
				r.Weight = weight
			}
		}
	}
	st.sealed = step.Step
	return dst
}

// pushReference is OnlineDebiaser.push: append one pair (evicting the
// oldest beyond Window), count it, and refit if due.
func (st *State) pushReference(p pair) {
	st.sums, st.sumsValid = nil, false
	if st.win.len() == st.cfg.Window {
		st.win.pop()
	}
	st.win.push(p)
	st.totalPairs++
	st.pending++
	st.maybeRefitReference()
}
