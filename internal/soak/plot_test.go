//go:build soak

package soak

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var (
	colSeries = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colWindow = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	colLimit  = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colFault  = color.RGBA{R: 255, G: 127, B: 14, A: 255}
)

// plots draws every series against the ended runs (with the windows the verdict compares and its
// limit) and against time (with the faults), and the rebuilds against the ended runs.
func (r *report) plots(dir string, t0 time.Time) error {
	n := float64(r.shape.runs)
	for _, v := range r.verdicts {
		m := v.m
		var byRuns, byTime plotter.XYs
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range r.samples {
			y := m.get(s)
			if math.IsNaN(y) {
				continue
			}
			byRuns = append(byRuns, plotter.XY{X: float64(s.ended), Y: y})
			byTime = append(byTime, plotter.XY{X: s.at.Sub(t0).Seconds(), Y: y})
			lo, hi = min(lo, y), max(hi, y)
		}
		if len(byRuns) == 0 {
			continue
		}
		judged := !v.absent && m.slack >= 0
		if judged {
			hi = max(hi, v.limit)
		}
		label := m.key
		if m.unit != "" {
			label += " (" + m.unit + ")"
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s against ended runs", m.title)
		p.X.Label.Text, p.Y.Label.Text = "ended runs", label
		p.Add(plotter.NewGrid())
		for _, f := range []float64{warmup, firstEnd, lastStart} {
			if err := addLine(p, plotter.XYs{{X: f * n, Y: lo}, {X: f * n, Y: hi}}, colWindow, true); err != nil {
				return err
			}
		}
		if judged {
			if err := addLine(p, plotter.XYs{{X: lastStart * n, Y: v.limit}, {X: n, Y: v.limit}}, colLimit, true); err != nil {
				return err
			}
		}
		if err := addLine(p, byRuns, colSeries, false); err != nil {
			return err
		}
		if err := p.Save(18*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, m.key+"_vs_ended_runs.png")); err != nil {
			return fmt.Errorf("soak: plot %s: %w", m.key, err)
		}

		p = plot.New()
		p.Title.Text = fmt.Sprintf("%s over time (faults in orange)", m.title)
		p.X.Label.Text, p.Y.Label.Text = "seconds", label
		p.Add(plotter.NewGrid())
		for _, f := range r.faults {
			for _, at := range []time.Time{f.start, f.end} {
				x := at.Sub(t0).Seconds()
				if err := addLine(p, plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}}, colFault, true); err != nil {
					return err
				}
			}
		}
		if err := addLine(p, byTime, colSeries, false); err != nil {
			return err
		}
		if err := p.Save(18*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, m.key+"_vs_time.png")); err != nil {
			return fmt.Errorf("soak: plot %s: %w", m.key, err)
		}
	}
	if len(r.rebuilds) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("runs read by a rebuild (bound %d in red)", r.bound)
	p.X.Label.Text, p.Y.Label.Text = "ended runs", "runs read from the changelog"
	p.Add(plotter.NewGrid())
	var pts plotter.XYs
	for _, b := range r.rebuilds {
		pts = append(pts, plotter.XY{X: float64(b.ended), Y: float64(b.runs + b.endedRuns)})
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return fmt.Errorf("soak: plot rebuilds: %w", err)
	}
	sc.Color = colSeries
	p.Add(sc)
	if err := addLine(p, plotter.XYs{{X: 0, Y: float64(r.bound)}, {X: n, Y: float64(r.bound)}}, colLimit, true); err != nil {
		return err
	}
	if err := p.Save(18*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, "rebuilds_vs_ended_runs.png")); err != nil {
		return fmt.Errorf("soak: plot rebuilds: %w", err)
	}
	return nil
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, dashed bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("soak: plot: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(0.8)
	}
	p.Add(l)
	return nil
}
