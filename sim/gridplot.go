package sim

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// gridDelta is one arm's final-score difference to real-GRPO over the
// (bias, noise) grid, as a plotter.GridXYZ (columns bias, rows noise).
type gridDelta struct {
	biases, noises []float64
	z              map[[2]float64]float64
}

func (g gridDelta) Dims() (c, r int)   { return len(g.biases), len(g.noises) }
func (g gridDelta) Z(c, r int) float64 { return g.z[[2]float64{g.biases[c], g.noises[r]}] }
func (g gridDelta) X(c int) float64    { return g.biases[c] }
func (g gridDelta) Y(r int) float64    { return g.noises[r] }

func gridAxes(cells []GridCell) (biases, noises []float64) {
	for _, c := range cells {
		if !slices.Contains(biases, c.Bias) {
			biases = append(biases, c.Bias)
		}
		if !slices.Contains(noises, c.Noise) {
			noises = append(noises, c.Noise)
		}
	}
	slices.Sort(biases)
	slices.Sort(noises)
	return biases, noises
}

// WriteGridPlots writes into dir, for every arm but real-GRPO, a heat map
// of its mean final score minus real-GRPO's over (B, σ)
// (heat_<arm>.png, one colour scale for all arms), and for every noise level
// a line plot of each arm's mean final score against B
// (final_vs_bias_noise<σ>.png). It returns the files written.
func WriteGridPlots(dir string, cells []GridCell) ([]string, error) {
	if len(cells) == 0 {
		return nil, nil
	}
	biases, noises := gridAxes(cells)
	var arms []string
	for _, s := range cells[0].Summary {
		arms = append(arms, s.Arm)
	}
	deltas, lim := gridDeltas(cells, arms, biases, noises)
	var files []string
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name)
		if err := p.Save(6*vg.Inch, 4.5*vg.Inch, path); err != nil {
			return fmt.Errorf("sim: plot %s: %w", name, err)
		}
		files = append(files, path)
		return nil
	}
	for _, arm := range arms {
		if arm == ArmRealGRPO || len(biases) < 2 || len(noises) < 2 {
			continue
		}
		if err := save(deltaHeatMap(arm, deltas[arm], lim), "heat_"+arm+".png"); err != nil {
			return files, err
		}
	}
	for _, n := range noises {
		p, err := finalVsBiasPlot(cells, arms, biases, n)
		if err != nil {
			return files, err
		}
		if err := save(p, fmt.Sprintf("final_vs_bias_noise%g.png", n)); err != nil {
			return files, err
		}
	}
	return files, nil
}

// gridDeltas collects every arm's final-score difference to real-GRPO over the grid, and the
// half-width lim of the one symmetric colour scale of all heat maps (white is "as good as
// real-GRPO").
func gridDeltas(cells []GridCell, arms []string, biases, noises []float64) (deltas map[string]gridDelta, lim float64) {
	deltas = map[string]gridDelta{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, arm := range arms {
		g := gridDelta{biases: biases, noises: noises, z: map[[2]float64]float64{}}
		for i := range cells {
			if s := findArm(&cells[i], arm); s != nil {
				g.z[[2]float64{cells[i].Bias, cells[i].Noise}] = s.FinalDelta.Mean
				if arm != ArmRealGRPO {
					lo, hi = min(lo, s.FinalDelta.Mean), max(hi, s.FinalDelta.Mean)
				}
			}
		}
		deltas[arm] = g
	}
	return deltas, max(math.Abs(lo), math.Abs(hi), 1e-3)
}

// deltaHeatMap plots one arm's final − real-GRPO over (B, σ) on the scale ±lim.
func deltaHeatMap(arm string, delta gridDelta, lim float64) *plot.Plot {
	pal := moreland.SmoothBlueRed().Palette(64)
	hm := plotter.NewHeatMap(delta, pal)
	hm.Min, hm.Max = -lim, lim
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: final − real-GRPO (blue worse; scale ±%.3f)", arm, lim)
	p.X.Label.Text = "bias strength B"
	p.Y.Label.Text = "noise σ"
	p.Add(hm)
	return p
}

// finalVsBiasPlot plots every arm's mean final score against B at noise level n.
func finalVsBiasPlot(cells []GridCell, arms []string, biases []float64, n float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("final score against bias strength, σ = %g (mean over seeds)", n)
	p.X.Label.Text = "bias strength B"
	p.Y.Label.Text = "final score"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, true
	for _, arm := range arms {
		var xys plotter.XYs
		for _, b := range biases {
			for k := range cells {
				if cells[k].Bias == b && cells[k].Noise == n {
					if s := findArm(&cells[k], arm); s != nil {
						xys = append(xys, plotter.XY{X: b, Y: s.Final.Mean})
					}
				}
			}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("sim: plot: %w", err)
		}
		l.Color = ArmColor(arm)
		l.Width = vg.Points(1.6)
		p.Add(l)
		p.Legend.Add(arm, l)
	}
	return p, nil
}
