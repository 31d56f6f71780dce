package demo

// FileDebias is the report's plot of the debias shift per step.
const FileDebias = "debias_shift.png"

// debiasPlot is every debiasing arm's mean |A(f(r̂)) − A(r̂)| per step (mean and 95% CI over
// seeds): how far Online Debiasing moved the world-model rows' advantages, which is what reaches
// the gradient. Arms without OD are left out (their shift is 0 by construction).
func debiasPlot(_ Report, arms []armAgg) (*figure, error) {
	p := newFigure("Debias shift: world-model advantages moved by the map"+seedNote(arms), "step",
		"mean |A(f(r̂)) − A(r̂)| over world-model rows")
	p.X.Tick.Marker = stepTicks{}
	drawn := 0
	for _, a := range arms {
		if !debiases(a) {
			continue
		}
		if err := p.addArm(a.name, a.name, stepXs(len(a.shift)-1), a.shift[1:], false, bounds{0, 1e9}); err != nil {
			return nil, err
		}
		drawn++
	}
	if drawn == 0 {
		p.Title.Text += ": no arm with Online Debiasing"
	}
	p.Y.Min = 0
	return p, nil
}

// debiases reports whether the arm ran with Online Debiasing on.
func debiases(a armAgg) bool {
	for _, r := range a.results {
		if r.State != nil && r.State.Config().Debias {
			return true
		}
	}
	return false
}
