package demo

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/wmrl/wmrl/sim"
)

// Report is what WriteReport renders: one result per arm (the demo runs one seed), the target
// definition and free-form settings shown at the top of the page.
type Report struct {
	Title          string
	Settings       [][2]string
	Results        []sim.Result
	TargetFraction float64
	// CalibrationArm names the arm whose anchor pairs and fitted map are plotted (default wmrl).
	CalibrationArm string
	// FinalLine is the last line the demo printed, repeated on the page.
	FinalLine string
}

// Report file names inside the report folder.
const (
	FileHTML        = "report.html"
	FileScore       = "score_vs_compute.png"
	FileScoreSteps  = "score_vs_step.png"
	FileCalibration = "calibration.png"
	FileIVD         = "ivd_weight.png"
	FileSummaryCSV  = "summary.csv"
	FileStepsCSV    = "steps.csv"
)

// WriteReport writes report.html, the PNG plots and the CSVs into dir (created if needed) and
// returns the paths written.
func WriteReport(dir string, r Report) ([]string, error) {
	if len(r.Results) == 0 {
		return nil, fmt.Errorf("demo: report: no results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: report: %w", err)
	}
	if r.CalibrationArm == "" {
		r.CalibrationArm = sim.ArmWMRL
	}
	var files []string
	for _, p := range []struct {
		name string
		make func(Report) (*plot.Plot, error)
	}{
		{FileScore, scoreVsCompute}, {FileScoreSteps, scoreVsStep}, {FileCalibration, calibrationPlot}, {FileIVD, ivdPlot},
	} {
		pl, err := p.make(r)
		if err != nil {
			return files, fmt.Errorf("demo: report: %s: %w", p.name, err)
		}
		path := filepath.Join(dir, p.name)
		if err := pl.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
			return files, fmt.Errorf("demo: report: %s: %w", p.name, err)
		}
		files = append(files, path)
	}
	sums := sim.Summarize(r.Results, r.TargetFraction)
	for _, c := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{FileSummaryCSV, func(b *bytes.Buffer) error { return sim.WriteSummaryCSV(b, sums) }},
		{FileStepsCSV, func(b *bytes.Buffer) error { return sim.WriteStepsCSV(b, r.Results) }},
		{FileHTML, func(b *bytes.Buffer) error { return renderHTML(b, r, sums) }},
	} {
		var buf bytes.Buffer
		if err := c.write(&buf); err != nil {
			return files, err
		}
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return files, fmt.Errorf("demo: report: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

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

// target is the demo's target line: TargetFraction × real-GRPO's final score, if present.
func target(r Report) (float64, bool) {
	for _, res := range r.Results {
		if res.Arm == sim.ArmRealGRPO {
			return r.TargetFraction * res.FinalScore(), true
		}
	}
	return 0, false
}

func scoreVsCompute(r Report) (*plot.Plot, error) {
	p := newPlot("Score vs execution compute", "real executions (sandbox runs)", "expected true score (held-out)")
	maxX := 1.0
	for _, res := range r.Results {
		if n := len(res.Steps); n > 0 {
			maxX = math.Max(maxX, float64(res.Steps[n-1].Executions))
		}
	}
	for i, res := range r.Results {
		xys := plotter.XYs{{X: 0, Y: res.InitialScore}}
		noExec := true
		for _, s := range res.Steps {
			xys = append(xys, plotter.XY{X: float64(s.Executions), Y: s.Score})
			noExec = noExec && s.Executions == 0
		}
		name := res.Arm
		if noExec {
			// An arm that never executes is a point at x = 0; draw its final score across the
			// axis so it can be compared at all.
			xys = plotter.XYs{{X: 0, Y: res.FinalScore()}, {X: maxX, Y: res.FinalScore()}}
			name += " (final, 0 executions)"
		}
		if err := addLine(p, i, name, xys, noExec); err != nil {
			return nil, err
		}
	}
	if t, ok := target(r); ok {
		if err := addTarget(p, t, 0, maxX); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func addTarget(p *plot.Plot, t, x0, x1 float64) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: t}, {X: x1, Y: t}})
	if err != nil {
		return err
	}
	l.Color = color.Gray{Y: 120}
	l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(l)
	p.Legend.Add("target", l)
	return nil
}

func scoreVsStep(r Report) (*plot.Plot, error) {
	p := newPlot("Score vs training step", "step", "expected true score (held-out)")
	steps := 1.0
	for i, res := range r.Results {
		xys := plotter.XYs{{X: 0, Y: res.InitialScore}}
		for _, s := range res.Steps {
			xys = append(xys, plotter.XY{X: float64(s.Step + 1), Y: s.Score})
		}
		steps = math.Max(steps, float64(len(res.Steps)))
		if err := addLine(p, i, res.Arm, xys, false); err != nil {
			return nil, err
		}
	}
	if t, ok := target(r); ok {
		if err := addTarget(p, t, 0, steps); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func calibrationPlot(r Report) (*plot.Plot, error) {
	var res *sim.Result
	for i := range r.Results {
		if r.Results[i].Arm == r.CalibrationArm {
			res = &r.Results[i]
		}
	}
	p := newPlot("Calibration ("+r.CalibrationArm+")", "world-model score (raw)", "executed score")
	p.Legend.Left, p.Legend.Top = true, true
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	ident, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	ident.Color = color.Gray{Y: 150}
	ident.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ident)
	p.Legend.Add("identity", ident)
	if res == nil || len(res.Pairs) == 0 {
		p.Title.Text += ": no anchor pairs"
		return p, nil
	}
	pts := make(plotter.XYs, len(res.Pairs))
	for i, a := range res.Pairs {
		pts[i] = plotter.XY{X: a.Predicted, Y: a.Executed}
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Color = color.NRGBA{R: 30, G: 100, B: 200, A: 120}
	sc.GlyphStyle.Radius = vg.Points(2)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	p.Add(sc)
	p.Legend.Add(fmt.Sprintf("anchor pairs (%d)", len(pts)), sc)
	if res.State != nil {
		if xs, ys := res.State.Breakpoints(); len(xs) > 0 {
			fit := plotter.XYs{{X: 0, Y: ys[0]}}
			for i := range xs {
				fit = append(fit, plotter.XY{X: xs[i], Y: ys[i]})
			}
			fit = append(fit, plotter.XY{X: 1, Y: ys[len(ys)-1]})
			l, err := plotter.NewLine(fit)
			if err != nil {
				return nil, err
			}
			l.Color = color.RGBA{R: 220, G: 60, B: 30, A: 255}
			l.Width = vg.Points(2.2)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("fitted monotone map (refit %d)", res.State.FitVersion()), l)
		}
	}
	return p, nil
}

func ivdPlot(r Report) (*plot.Plot, error) {
	p := newPlot("Inverse-variance anchor weight", "step", "anchor row weight (world-model rows: 1)")
	for i, res := range r.Results {
		if res.Arm == sim.ArmRealGRPO || res.Arm == sim.ArmPureWM {
			continue
		}
		xys := make(plotter.XYs, 0, len(res.Steps))
		for _, s := range res.Steps {
			xys = append(xys, plotter.XY{X: float64(s.Step), Y: s.AnchorWeight})
		}
		if len(xys) == 0 {
			continue
		}
		if err := addLine(p, i, res.Arm, xys, false); err != nil {
			return nil, err
		}
	}
	p.Y.Min = 0
	return p, nil
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"est": func(e sim.Estimate, d int) string { return e.Format(d) },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.R.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
code{background:#f5f5f5;padding:1px 4px}
</style></head><body>
<h1>{{.R.Title}}</h1>
<p><code>{{.R.FinalLine}}</code></p>
<h2>Settings</h2>
<table>{{range .R.Settings}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
<h2>Summary</h2>
<p>Target: {{printf "%.0f" .Pct}}% of real-GRPO's final score{{if .HasTarget}} ({{printf "%.3f" .Target}}){{end}}.
Execution compute is counted in real executions (sandbox runs); seconds are measured wall time.</p>
<table><tr><th>arm</th><th>final score</th><th>Δ vs real-GRPO</th><th>reached target</th><th>executions to target</th><th>exec s to target</th><th>speedup (executions)</th><th>executions total</th></tr>
{{range .Sums}}<tr><td>{{.Arm}}</td><td>{{est .Final 3}}</td><td>{{est .FinalDelta 3}}</td><td>{{.Reached}}/{{.Seeds}}</td><td>{{est .ExecutionsToTarget 0}}</td><td>{{est .ExecSecondsToTarget 2}}</td><td>{{if and .Reached (not .Speedup.N)}}∞ (no executions){{else}}{{est .Speedup 2}}{{end}}</td><td>{{est .Executions 0}}</td></tr>
{{end}}</table>
<h2>Score vs execution compute</h2><img src="score_vs_compute.png" alt="score vs execution compute">
<h2>Score vs step</h2><img src="score_vs_step.png" alt="score vs step">
<h2>Calibration</h2><p>Anchor pairs (raw world-model score, executed score) of the {{.R.CalibrationArm}} arm and the monotone map in force at the end.</p><img src="calibration.png" alt="calibration curve">
<h2>IVD weight</h2><img src="ivd_weight.png" alt="IVD weight over steps">
<p>Raw data: <a href="steps.csv">steps.csv</a>, <a href="summary.csv">summary.csv</a>.</p>
</body></html>
`))

func renderHTML(b *bytes.Buffer, r Report, sums []sim.ArmSummary) error {
	t, ok := target(r)
	if err := page.Execute(b, map[string]any{"R": r, "Sums": sums, "Pct": 100 * r.TargetFraction, "Target": t, "HasTarget": ok}); err != nil {
		return fmt.Errorf("demo: report: html: %w", err)
	}
	return nil
}
