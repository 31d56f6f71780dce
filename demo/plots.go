package demo

import (
	"image/color"
	"math"
	"slices"

	"github.com/wmrl/wmrl/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// stepTicks labels an axis of steps (or counts) with integers only.
type stepTicks struct{}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, i int, name string, xys plotter.XYs, dashed bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.8)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// bounds are the values a plotted quantity can take; bands are clipped to them (a t interval
// over few seeds can reach past a weight cap or below an error of 0).
type bounds struct{ lo, hi float64 }

// addBand shades mean ± CI where the estimates have a CI (two or more seeds).
func addBand(p *plot.Plot, i int, xs []float64, es []sim.Estimate, b bounds) error {
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
	c := color.NRGBAModel.Convert(plotutil.Color(i)).(color.NRGBA)
	c.A = 50
	poly.Color = c
	poly.LineStyle.Width = 0
	p.Add(poly)
	return nil
}

// addMeanBand draws the mean line of es over xs with its CI band.
func addMeanBand(p *plot.Plot, i int, name string, xs []float64, es []sim.Estimate, dashed bool, b bounds) error {
	if err := addBand(p, i, xs, es, b); err != nil {
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
	return addLine(p, i, name, xys, dashed)
}

func addHLine(p *plot.Plot, name string, y, x0, x1 float64, c color.Color) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return err
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func addHLineXY(p *plot.Plot, name string, xys plotter.XYs, c color.Color) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
