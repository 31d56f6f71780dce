package demo

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/wmrl/wmrl/sim"
)

// Report is what WriteReport renders: results of one or more arms over one or more seeds (the
// demo runs one seed, simulate several: then every curve is a mean with a 95% CI band), the
// target definition and settings shown at the top of the page.
type Report struct {
	Title          string
	Settings       [][2]string
	Results        []sim.Result
	TargetFraction float64
	// CalibrationArm names the arm whose anchor pairs, maps and calibration error are plotted
	// (default wmrl).
	CalibrationArm string
	// FinalLine is the last line the demo printed, repeated on the page.
	FinalLine string
}

// Report file names inside the report folder.
const (
	FileHTML        = "report.html"
	FileScore       = "score_vs_compute.png"
	FileScoreSteps  = "score_vs_step.png"
	FileGap         = "gap_vs_step.png"
	FileCalibration = "calibration.png"
	FileCalError    = "calibration_error.png"
	FileIVD         = "ivd_weight.png"
	FileSummaryCSV  = "summary.csv"
	FileStepsCSV    = "steps.csv"
)

// settingFloor labels the read-out floor's row of SimSettings; the calibration plot's caption
// quotes its value.
const settingFloor = "world model: read-out floor"

// SimSettings are the task loop's settings as rows of the report's settings table.
func SimSettings(c sim.Config) [][2]string {
	wm := c.WorldModel
	return [][2]string{
		{"steps × groups × G", fmt.Sprintf("%d × %d × %d", c.Steps, c.Groups, c.GroupSize)},
		{"learning rate", fmt.Sprint(c.LR)},
		{"sandbox overhead per execution", c.ExecOverhead.String()},
		{"world model: training rows the proxy fits on", fmt.Sprint(wm.Subsample)},
		{"world model: rows it scores its fit on", fmt.Sprint(wm.Probe)},
		{"world model: fraction of iterations run", fmt.Sprint(wm.IterFraction)},
		{"world model: fraction of capacity", fmt.Sprint(wm.CapacityFraction)},
		{"world model: weight of the in-sample score (optimism)", fmt.Sprint(wm.Optimism)},
		{"world model: read-out", fmt.Sprintf("floor + (ceiling − floor) · raw^%g", wm.Gamma)},
		{settingFloor, fmt.Sprint(wm.Floor)},
		{"world model: read-out ceiling", fmt.Sprint(wm.Ceil)},
	}
}

// WriteReport writes report.html, the PNG plots and the CSVs into dir (created if needed) and
// returns the paths written.
func WriteReport(dir string, r Report) ([]string, error) {
	if len(r.Results) == 0 {
		return nil, fmt.Errorf("demo: report: no results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: report: %w", err)
	}
	r.CalibrationArm = cmp.Or(r.CalibrationArm, sim.ArmWMRL)
	arms := aggregate(r.Results)
	var files []string
	for _, p := range reportPlots {
		pl, err := p.make(r, arms)
		if err != nil {
			return files, fmt.Errorf("demo: report: %s: %w", p.name, err)
		}
		path := filepath.Join(dir, p.name)
		if err := savePNG(pl, path); err != nil {
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
		{FileHTML, func(b *bytes.Buffer) error { return renderHTML(b, r, sums, arms) }},
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

// reportPlots are the report's plots, by file name, in page order.
var reportPlots = []struct {
	name string
	make func(Report, []armAgg) (*figure, error)
}{
	{FileScore, scoreVsCompute}, {FileScoreSteps, scoreVsStep}, {FileGap, gapPlot},
	{FileCalibration, calibrationPlot}, {FileCalError, calErrorPlot}, {FileIVD, ivdPlot},
	{FileDebias, debiasPlot},
}

// armAgg is one arm over its seeds, per step (index 0 is the untrained policy, index v+1 the
// state after step v).
type armAgg struct {
	name    string
	seeds   int
	results []sim.Result
	// score, executions, gap (score − real-GRPO's in the same seed), raw and debiased calibration
	// error, anchor weight, debias shift: one estimate per point.
	score, execs, gap, raw, cal, weight, shift []sim.Estimate
	weightCap                                  float64
}

func aggregate(results []sim.Result) []armAgg {
	real := map[int64]sim.Result{}
	for _, r := range results {
		if r.Arm == sim.ArmRealGRPO {
			real[r.Seed] = r
		}
	}
	var out []armAgg
	idx := map[string]int{}
	for _, r := range results {
		i, ok := idx[r.Arm]
		if !ok {
			i = len(out)
			idx[r.Arm] = i
			out = append(out, armAgg{name: r.Arm})
		}
		out[i].results = append(out[i].results, r)
	}
	for i := range out {
		a := &out[i]
		a.seeds = len(a.results)
		n := 0
		for _, r := range a.results {
			n = max(n, len(r.Steps)+1)
			if r.State != nil {
				a.weightCap = r.State.Config().WeightCap
			}
		}
		for v := range n {
			var score, execs, gap, raw, cal, weight, shift []float64
			for _, r := range a.results {
				if v > len(r.Steps) {
					continue
				}
				sc, ex := r.InitialScore, 0.0
				if v > 0 {
					s := r.Steps[v-1]
					sc, ex = s.Score, float64(s.Executions)
					weight, shift = append(weight, s.AnchorWeight), append(shift, s.DebiasShift)
					if !math.IsNaN(s.RawMAE) {
						raw, cal = append(raw, s.RawMAE), append(cal, s.CalibrationMAE)
					}
				}
				score, execs = append(score, sc), append(execs, ex)
				if rg, ok := real[r.Seed]; ok && v <= len(rg.Steps) {
					rs := rg.InitialScore
					if v > 0 {
						rs = rg.Steps[v-1].Score
					}
					gap = append(gap, sc-rs)
				}
			}
			a.score, a.execs, a.gap = append(a.score, sim.NewEstimate(score)), append(a.execs, sim.NewEstimate(execs)), append(a.gap, sim.NewEstimate(gap))
			a.raw, a.cal, a.weight = append(a.raw, sim.NewEstimate(raw)), append(a.cal, sim.NewEstimate(cal)), append(a.weight, sim.NewEstimate(weight))
			a.shift = append(a.shift, sim.NewEstimate(shift))
		}
	}
	return out
}

func (stepTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000} {
		step = s
		if span/s <= 8 {
			break
		}
	}
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		out = append(out, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	return out
}

var unbounded = bounds{math.Inf(-1), math.Inf(1)}

// seedNote is appended to plot titles: what the bands are.
func seedNote(arms []armAgg) string {
	n := 0
	for _, a := range arms {
		n = max(n, a.seeds)
	}
	if n < 2 {
		return " (one seed)"
	}
	return fmt.Sprintf(" (mean, 95%% CI band over %d seeds)", n)
}

func stepXs(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	return xs
}

// target is the target line: TargetFraction × real-GRPO's final score (mean over seeds).
func target(r Report) (float64, bool) {
	var ts []float64
	for _, res := range r.Results {
		if res.Arm == sim.ArmRealGRPO {
			ts = append(ts, r.TargetFraction*res.FinalScore())
		}
	}
	if len(ts) == 0 {
		return 0, false
	}
	return sim.NewEstimate(ts).Mean, true
}

func scoreVsCompute(r Report, arms []armAgg) (*figure, error) {
	p := newFigure("Score vs execution compute"+seedNote(arms), "real executions (sandbox runs, mean over seeds)", "expected true score (held-out)")
	p.X.Tick.Marker = stepTicks{}
	maxX := 1.0
	for _, a := range arms {
		if n := len(a.execs); n > 0 {
			maxX = math.Max(maxX, a.execs[n-1].Mean)
		}
	}
	for _, a := range arms {
		if a.execs[len(a.execs)-1].Mean == 0 {
			// An arm that never executes is a point at x = 0; draw its final score across the
			// axis so it can be compared at all.
			fin := a.score[len(a.score)-1]
			if err := p.addArm(a.name, a.name+" (final, 0 executions)", []float64{0, maxX}, []sim.Estimate{fin, fin}, true, bounds{0, 1}); err != nil {
				return nil, err
			}
			continue
		}
		xs := make([]float64, len(a.execs))
		for j, e := range a.execs {
			xs[j] = e.Mean
		}
		if err := p.addArm(a.name, a.name, xs, a.score, false, bounds{0, 1}); err != nil {
			return nil, err
		}
	}
	if t, ok := target(r); ok {
		if err := p.addHLine("", "target", t, 0, maxX, grey(90)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func scoreVsStep(r Report, arms []armAgg) (*figure, error) {
	p := newFigure("Score vs training step"+seedNote(arms), "step (0: untrained policy)", "expected true score (held-out)")
	p.X.Tick.Marker = stepTicks{}
	steps := 1.0
	for _, a := range arms {
		steps = math.Max(steps, float64(len(a.score)-1))
		if err := p.addArm(a.name, a.name, stepXs(len(a.score)), a.score, false, bounds{0, 1}); err != nil {
			return nil, err
		}
	}
	if t, ok := target(r); ok {
		if err := p.addHLine("", "target", t, 0, steps, grey(90)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// gapPlot is every arm's score minus real-GRPO's in the same seed, per step: how far training on
// the world model alone (pure-wm) or with corrections falls behind real execution.
func gapPlot(r Report, arms []armAgg) (*figure, error) {
	p := newFigure("Gap to real-GRPO over steps"+seedNote(arms), "step (0: untrained policy)", "score − real-GRPO's score (same seed)")
	p.X.Tick.Marker = stepTicks{}
	steps := 1.0
	for _, a := range arms {
		if a.name == sim.ArmRealGRPO {
			continue
		}
		steps = math.Max(steps, float64(len(a.gap)-1))
		if err := p.addArm(a.name, a.name, stepXs(len(a.gap)), a.gap, a.name == sim.ArmPureWM, unbounded); err != nil {
			return nil, err
		}
	}
	if err := p.addHLine(sim.ArmRealGRPO, sim.ArmRealGRPO+" (0)", 0, 0, steps, sim.ArmColor(sim.ArmRealGRPO)); err != nil {
		return nil, err
	}
	return p, nil
}

func calArm(r Report, arms []armAgg) *armAgg {
	for i := range arms {
		if arms[i].name == r.CalibrationArm {
			return &arms[i]
		}
	}
	return nil
}

// calErrorPlot is the calibration arm's per-step error of the raw world-model score and of the
// debiased one (the map in force before the step: out of sample).
func calErrorPlot(r Report, arms []armAgg) (*figure, error) {
	a := calArm(r, arms)
	p := newFigure("Calibration error per step ("+r.CalibrationArm+")"+seedNote(arms), "step",
		"mean |score − executed| over anchor rollouts")
	p.X.Tick.Marker = stepTicks{}
	if a == nil {
		p.Title.Text += ": arm not run"
		return p, nil
	}
	xs := make([]float64, len(a.raw))
	for j := range xs {
		xs[j] = float64(j - 1) // index 0 is the untrained policy, which has no error
	}
	// The raw score is the reference (grey); the debiased one is what the arm trains on (its colour).
	if err := p.addMeanBand("", "raw world-model score", grey(110), xs[1:], a.raw[1:], true, bounds{0, 1}); err != nil {
		return nil, err
	}
	if err := p.addArm(a.name, "debiased (map in force for the step)", xs[1:], a.cal[1:], false, bounds{0, 1}); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

// calibrationPlot shows the calibration arm's anchor pairs (first seed), shaded from early to
// late steps, and its fitted map at up to four points in time.
func calibrationPlot(r Report, arms []armAgg) (*figure, error) {
	p := newFigure("Calibration over time ("+r.CalibrationArm+")", "world-model score (raw)", "executed score")
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	if err := p.addRefLine("", "identity (the map until the first refit)", plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}}, grey(150)); err != nil {
		return nil, err
	}
	a := calArm(r, arms)
	if a == nil || len(a.results[0].Pairs) == 0 {
		p.Title.Text += ": no anchor pairs"
		return p, nil
	}
	res := a.results[0]
	if a.seeds > 1 {
		p.Title.Text += fmt.Sprintf(", seed %d", res.Seed)
	}
	steps := len(res.Steps)
	// The arm's pairs in the arm's colour, fainter for earlier steps; the maps in greys, darker
	// and thicker for later refits.
	thirds := []struct {
		lo, hi int
		c      color.NRGBA
	}{
		{0, steps / 3, armColor(a.name, 70)},
		{steps / 3, 2 * steps / 3, armColor(a.name, 140)},
		{2 * steps / 3, steps, armColor(a.name, 230)},
	}
	for _, th := range thirds {
		var pts plotter.XYs
		for _, pr := range res.Pairs {
			if pr.Step >= th.lo && pr.Step < th.hi {
				pts = append(pts, plotter.XY{X: pr.Predicted, Y: pr.Executed})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = th.c
		sc.GlyphStyle.Radius = vg.Points(2)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		label := fmt.Sprintf("anchor pairs, steps %d–%d (%d)", th.lo, th.hi-1, len(pts))
		p.Legend.Add(label, sc)
		p.record(label, a.name, th.c)
	}
	var refits []sim.Map
	for _, m := range res.Maps {
		if len(m.X) > 0 {
			refits = append(refits, m)
		}
	}
	maps := pickMaps(refits, 4)
	for i, m := range maps {
		fit := plotter.XYs{{X: 0, Y: m.Y[0]}}
		for j := range m.X {
			fit = append(fit, plotter.XY{X: m.X[j], Y: m.Y[j]})
		}
		fit = append(fit, plotter.XY{X: 1, Y: m.Y[len(m.Y)-1]})
		t := 1.0
		if len(maps) > 1 {
			t = float64(i) / float64(len(maps)-1)
		}
		label := fmt.Sprintf("map after step %d (refit %d)", m.Step, m.FitVersion)
		if err := p.addLine("", label, fit, grey(uint8(170-170*t)), vg.Points(1.4+1.4*t), nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// pickMaps chooses up to n maps evenly spread over ms, the first and the last included.
func pickMaps(ms []sim.Map, n int) []sim.Map {
	if len(ms) <= n {
		return ms
	}
	out := make([]sim.Map, 0, n)
	for i := range n {
		out = append(out, ms[i*(len(ms)-1)/(n-1)])
	}
	return out
}

func ivdPlot(r Report, arms []armAgg) (*figure, error) {
	p := newFigure("Inverse-variance anchor weight"+seedNote(arms), "step", "anchor row weight in force (world-model rows: 1)")
	p.X.Tick.Marker = stepTicks{}
	capW, steps := 0.0, 1.0
	for _, a := range arms {
		if a.name == sim.ArmRealGRPO || a.name == sim.ArmPureWM {
			continue
		}
		capW = math.Max(capW, a.weightCap)
		steps = math.Max(steps, float64(len(a.weight)-1))
		if err := p.addArm(a.name, a.name, stepXs(len(a.weight)-1), a.weight[1:], false, bounds{1, a.weightCap}); err != nil {
			return nil, err
		}
	}
	p.Y.Min = 0
	if capW > 0 {
		if err := p.addHLine("", fmt.Sprintf("cap (%g)", capW), capW, 0, steps, grey(60)); err != nil {
			return nil, err
		}
		p.Y.Max = capW + 0.5
	}
	return p, nil
}

// page is report.html: what the run found first (headline numbers, the summary table, the plots),
// how it was set up last. Every plot fills the content column (imgCSSWidth pixels).
var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"est":    func(e sim.Estimate, d int) string { return e.Format(d) },
	"swatch": swatch,
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.R.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:{{.ImgW}}px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img.plot{display:block;width:100%;height:auto;border:1px solid #eee;margin:.5em 0 1.5em}
table.settings td{text-align:left}code{background:#f5f5f5;padding:1px 4px}
.cap{color:#444;font-size:.92em}
.sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;margin-right:.4em;vertical-align:-.1em}
.headline{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.headline>div{flex:1 1 14em;border:1px solid #ddd;border-radius:6px;padding:.6em 1em}
.headline .v{font-size:1.8em;font-weight:600}.headline .k{color:#555;font-size:.9em}
dl.defs{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;font-size:.9em;color:#444}
dl.defs dt{font-weight:600}dl.defs dd{margin:0}
</style></head><body>
<h1>{{.R.Title}}</h1>
{{if .R.FinalLine}}<p><code>{{.R.FinalLine}}</code></p>{{end}}
<section id="results">
<h2>Results</h2>
{{with .Head}}<div class="headline">
<div><div class="k">speedup to target ({{.Arm}} vs {{.Real}})</div><div class="v">{{.Speedup}}</div><div class="k">{{.SpeedupNote}}</div></div>
<div><div class="k">final score (held-out)</div><div class="v"><span class="sw" style="background:{{swatch .Arm}}"></span>{{.Final}}</div><div class="k">{{.Arm}}{{if .RealFinal}} · {{.Real}}: {{.RealFinal}}{{end}}</div></div>
<div><div class="k">real executions (sandbox runs)</div><div class="v"><span class="sw" style="background:{{swatch .Arm}}"></span>{{.Execs}}</div><div class="k">{{.Arm}}{{if .RealExecs}} · {{.Real}}: {{.RealExecs}}{{end}}</div></div>
</div>{{end}}
<p>Target: {{printf "%.0f" .Pct}}% of real-GRPO's final score{{if .HasTarget}} ({{printf "%.3f" .Target}}{{if gt .Seeds 1}}, mean over seeds{{end}}){{end}}.
{{if gt .Seeds 1}}Values are mean ± 95% CI over {{.Seeds}} seeds (Student t).{{else}}One seed, so no confidence intervals.{{end}}
An arm's colour is the same in every plot.</p>
<table class="summary"><tr><th>arm</th><th>final</th><th>Δ real</th><th>reached</th><th>execs→tgt</th><th>exec s→tgt</th><th>speedup</th><th>execs</th></tr>
{{range .Sums}}<tr><td><span class="sw" style="background:{{swatch .Arm}}"></span>{{.Arm}}</td><td>{{est .Final 3}}</td><td>{{est .FinalDelta 3}}</td><td>{{.Reached}}/{{.Seeds}}</td><td>{{est .ExecutionsToTarget 0}}</td><td>{{est .ExecSecondsToTarget 2}}</td><td>{{.FormatSpeedup}}</td><td>{{est .Executions 0}}</td></tr>
{{end}}</table>
<dl class="defs">
<dt>final</dt><dd>expected true score of the policy on the held-out problems after the last step</dd>
<dt>Δ real</dt><dd>final minus real-GRPO's final score in the same seed</dd>
<dt>reached</dt><dd>seeds in which the arm reached the target</dd>
<dt>execs→tgt</dt><dd>real executions (sandbox runs) until the target was first reached, over the seeds that reached it</dd>
<dt>exec s→tgt</dt><dd>measured wall time of those executions, seconds</dd>
<dt>speedup</dt><dd>real-GRPO's execs→tgt divided by the arm's, per seed; ∞ when the arm reached the target without executing</dd>
<dt>execs</dt><dd>real executions of the whole run</dd>
</dl>
</section>
<section id="plots">
<h2>Score vs execution compute</h2><img class="plot" src="score_vs_compute.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="score vs execution compute">
<h2>Score vs step</h2><img class="plot" src="score_vs_step.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="score vs step">
<h2>Gap to real-GRPO</h2><p class="cap">Each arm's score minus real-GRPO's in the same seed, per step. The dashed line is the pure world model (no execution at all).</p><img class="plot" src="gap_vs_step.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="gap to real-GRPO over steps">
<h2>Calibration</h2><p class="cap">Anchor pairs (raw world-model score, executed score) of the {{.R.CalibrationArm}} arm in its colour, fainter for earlier steps, and the monotone map fitted by Online Debiasing at a few points in time in greys, darker for later refits (the identity map is in force until the window holds enough pairs). Pairs at a world-model score of about {{.Floor}} are solutions the proxy scores at its read-out floor; pairs at an executed score of 0 are solutions that score 0 when really executed.</p><img class="plot" src="calibration.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="calibration map over time">
<h2>Calibration error per step</h2><p class="cap">Mean |score − executed| over each step's anchor rollouts, for the raw world-model score (grey, dashed) and for the debiased score (the map in force before the step, so out of sample). Until the first refit the map is the identity and the two lines coincide.</p><img class="plot" src="calibration_error.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="calibration error per step, raw vs debiased">
<h2>IVD weight</h2><p class="cap">Weight of anchor rows in the loss (world-model rows have weight 1); the dotted grey line is the configured cap.</p><img class="plot" src="ivd_weight.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="IVD weight over steps">
<h2>Debias shift</h2><p class="cap">Mean |A(f(r̂)) − A(r̂)| over each step's world-model rows: how far the calibration map moved their advantages (steps.csv: debias_shift). Under std-normalised GRPO a map that is affine over a group's scores is cancelled, so a calibration error that falls while this stays near 0 means Online Debiasing did not change the gradient.</p><img class="plot" src="debias_shift.png" width="{{.ImgW}}" height="{{.ImgH}}" alt="debias shift per step">
</section>
<section id="settings">
<h2>Settings</h2>
<table class="settings">{{range .R.Settings}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
</section>
<p>Raw data: <a href="steps.csv">steps.csv</a>, <a href="summary.csv">summary.csv</a>.</p>
</body></html>
`))

func renderHTML(b *bytes.Buffer, r Report, sums []sim.ArmSummary, arms []armAgg) error {
	t, ok := target(r)
	seeds := 0
	for _, a := range arms {
		seeds = max(seeds, a.seeds)
	}
	floor := "the read-out floor"
	for _, row := range r.Settings {
		if row[0] == settingFloor {
			floor = row[1]
		}
	}
	if err := page.Execute(b, map[string]any{"R": r, "Sums": sums, "Pct": 100 * r.TargetFraction, "Target": t, "HasTarget": ok,
		"Seeds": seeds, "Floor": floor, "Head": newHeadline(sums, r.CalibrationArm), "ImgW": imgCSSWidth, "ImgH": imgCSSHeight}); err != nil {
		return fmt.Errorf("demo: report: html: %w", err)
	}
	return nil
}
