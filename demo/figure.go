package demo

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/wmrl/wmrl/sim"
)

// Plot geometry. The page's content column is imgCSSWidth CSS pixels wide and every plot fills it;
// a plot is drawn at plotWidth × plotHeight (1 inch = 96 CSS pixels) and rasterised at plotDPI,
// twice the CSS resolution, so lines and ticks stay sharp on high-density screens and when zoomed.
const (
	plotWidth  = 11 * vg.Inch
	plotHeight = 5 * vg.Inch
	plotDPI    = 2 * vgimg.DefaultDPI
	// imgCSSWidth and imgCSSHeight are the plot's size on the page, in CSS pixels.
	imgCSSWidth  = 11 * vgimg.DefaultDPI
	imgCSSHeight = 5 * vgimg.DefaultDPI
	// PlotPixelWidth is the width of every report PNG, in pixels.
	PlotPixelWidth = 11 * plotDPI
	// legendGap separates the data area from the legend column on its right.
	legendGap = 0.15 * vg.Inch
)

// series is one element drawn on a figure. Figures record them so the colour of every element can
// be checked: an arm's element has the arm's colour from sim.ArmColor, anything else (targets,
// caps, the identity, the calibration maps) is grey.
type series struct {
	label string
	arm   string // empty for reference elements
	color color.NRGBA
}

// figure is a plot and the record of what it draws.
type figure struct {
	*plot.Plot
	series []series
}

func newFigure(title, x, y string) *figure {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(12)
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Padding = vg.Points(3)
	p.Add(plotter.NewGrid())
	return &figure{Plot: p}
}

// armColor is the arm's colour with the given opacity.
func armColor(arm string, alpha uint8) color.NRGBA {
	c := sim.ArmColor(arm)
	c.A = alpha
	return c
}

// grey is a reference colour: level 0 is black, 255 white.
func grey(level uint8) color.NRGBA { return color.NRGBA{R: level, G: level, B: level, A: 255} }

func (f *figure) record(label, arm string, c color.Color) {
	f.series = append(f.series, series{label: label, arm: arm, color: color.NRGBAModel.Convert(c).(color.NRGBA)})
}

// layout splits a canvas of the plot's size into the plot (axes and data) on the left and the
// legend column on the right, so the legend never covers data. Without legend entries the plot
// takes the whole width.
func layout(p *plot.Plot, c draw.Canvas) (plotArea, legendArea draw.Canvas) {
	r := p.Legend.Rectangle(c)
	w := r.Size().X
	if w == 0 {
		return c, draw.Canvas{}
	}
	// Room for the entries' text as measured, plus a space either side of it.
	w += 2 * p.Legend.TextStyle.Rectangle(" ").Max.X
	plotArea = draw.Crop(c, 0, -(w + legendGap), 0, 0)
	legendArea = draw.Crop(c, c.Max.X-c.Min.X-w, 0, 0, 0)
	// Align the legend's first entry with the top of the data area, below the title.
	legendArea.Max.Y = p.DataCanvas(plotArea).Max.Y
	return plotArea, legendArea
}

// savePNG draws f with its legend beside the data (not over it) and writes it as a PNG of
// PlotPixelWidth pixels.
func savePNG(f *figure, path string) error {
	img := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))
	c := draw.New(img)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	plotArea, legendArea := layout(f.Plot, c)
	legend := f.Legend
	legend.Top, legend.Left = true, true
	f.Legend = plot.NewLegend() // drawn below, outside the data area
	f.Draw(plotArea)
	f.Legend = legend
	if legendArea.Canvas != nil {
		legend.Draw(legendArea)
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		out.Close()
		return fmt.Errorf("demo: plot %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("demo: plot: %w", err)
	}
	return nil
}

// niceTicks labels a continuous axis at 5 to 10 round values (steps of 1, 2, 2.5 or 5 times a
// power of ten) with a minor tick between them. gonum's default labels only 2 or 3 values on a
// short range (0.35, 0.5, 0.65), too few to read a value off a full-width plot.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/10)))
	step, decimals := 0.0, 0
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		decimals = max(0, int(-math.Floor(math.Log10(step)+1e-9)))
		if m == 2.5 {
			decimals++
		}
		if span/step <= 10 {
			break
		}
	}
	var out []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+1e-9*span; i++ {
		v := i * step
		if v == 0 {
			v = 0 // no "-0"
		}
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
		if minor := v + step/2; minor <= hi {
			out = append(out, plot.Tick{Value: minor})
		}
	}
	if first := math.Ceil(lo/step-1e-9) * step; first-step/2 >= lo {
		out = append(out, plot.Tick{Value: first - step/2})
	}
	return out
}
