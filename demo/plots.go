package demo

import (
	"image/color"
	"math"
	"slices"

	"github.com/wmrl/wmrl/sim"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// stepTicks labels an axis of steps (or counts) with integers only.
type stepTicks struct{}

// addLine draws xys in colour c, width w and dashes (nil: solid), and records it as the arm's
// element (arm empty: a reference).
func (f *figure) addLine(arm, name string, xys plotter.XYs, c color.NRGBA, w vg.Length, dashes []vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, w, dashes
	f.Add(l)
	f.Legend.Add(name, l)
	f.record(name, arm, c)
	return nil
}

// bounds are the values a plotted quantity can take; bands are clipped to them (a t interval
// over few seeds can reach past a weight cap or below an error of 0).
type bounds struct{ lo, hi float64 }

// addBand shades mean ± CI where the estimates have a CI (two or more seeds), in a light tint of c.
func (f *figure) addBand(arm string, c color.NRGBA, xs []float64, es []sim.Estimate, b bounds) error {
	var upper, lower plotter.XYs
	for j, e := range es {
		if math.IsNaN(e.CI) || math.IsNaN(e.Mean) {
			continue
		}
		upper = append(upper, plotter.XY{X: xs[j], Y: min(e.Mean+e.CI, b.hi)})
		lower = append(lower, plotter.XY{X: xs[j], Y: max(e.Mean-e.CI, b.lo)})
	}
	if len(upper) < 2 {
		return nil
	}
	slices.Reverse(lower)
	poly, err := plotter.NewPolygon(append(upper, lower...))
	if err != nil {
		return err
	}
	c.A = 50
	poly.Color = c
	poly.LineStyle.Width = 0
	f.Add(poly)
	f.record("CI band", arm, c)
	return nil
}

// addMeanBand draws the mean line of es over xs with its CI band, in colour c.
func (f *figure) addMeanBand(arm, name string, c color.NRGBA, xs []float64, es []sim.Estimate, dashed bool, b bounds) error {
	if err := f.addBand(arm, c, xs, es, b); err != nil {
		return err
	}
	var xys plotter.XYs
	for j, e := range es {
		if !math.IsNaN(e.Mean) {
			xys = append(xys, plotter.XY{X: xs[j], Y: e.Mean})
		}
	}
	if len(xys) == 0 {
		return nil
	}
	var dashes []vg.Length
	if dashed {
		dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	return f.addLine(arm, name, xys, c, vg.Points(2), dashes)
}

// addArm draws an arm's mean line and band in the arm's colour.
func (f *figure) addArm(arm, name string, xs []float64, es []sim.Estimate, dashed bool, b bounds) error {
	return f.addMeanBand(arm, name, sim.ArmColor(arm), xs, es, dashed, b)
}

// addRefLine draws a dotted reference line (a target, a cap, the identity): grey unless it
// stands for an arm (real-GRPO's zero in the gap plot), then in the arm's colour.
func (f *figure) addRefLine(arm, name string, xys plotter.XYs, c color.NRGBA) error {
	return f.addLine(arm, name, xys, c, vg.Points(1.5), []vg.Length{vg.Points(2), vg.Points(3)})
}

// addHLine is addRefLine for a horizontal line at y from x0 to x1.
func (f *figure) addHLine(arm, name string, y, x0, x1 float64, c color.NRGBA) error {
	return f.addRefLine(arm, name, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, c)
}
