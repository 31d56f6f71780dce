package demo

import (
	"bytes"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/wmrl/wmrl/sim"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// layoutResults are three seeds of four arms (one not a standard arm, so the palette's fallback is
// exercised), with anchor pairs and refits for the calibration arm: every plot has data.
func layoutResults() []sim.Result {
	var out []sim.Result
	for seed := int64(1); seed <= 3; seed++ {
		for k, arm := range []string{sim.ArmRealGRPO, sim.ArmPureWM, sim.ArmWMRL, "my-arm"} {
			r := sim.Result{Arm: arm, Seed: seed, InitialScore: 0.3}
			for v := range 12 {
				s := sim.StepRecord{Step: v, Score: 0.3 + 0.03*float64(v)*(1+0.1*float64(k)) + 0.01*float64(seed),
					RawMAE: math.NaN(), CalibrationMAE: math.NaN(), AnchorWeight: 1 + 0.2*float64(v)}
				switch arm {
				case sim.ArmRealGRPO:
					s.Executions = 64 * (v + 1)
				case sim.ArmPureWM:
				default:
					s.Executions = 16 * (v + 1)
					s.RawMAE, s.CalibrationMAE = 0.2, 0.1+0.01*float64(seed)
				}
				r.Steps = append(r.Steps, s)
				if arm == sim.ArmWMRL {
					for j := range 8 {
						x := float64(j) / 8
						r.Pairs = append(r.Pairs, sim.Pair{Step: v, Predicted: x, Executed: x * x})
					}
					if v%3 == 2 {
						r.Maps = append(r.Maps, sim.Map{Step: v, FitVersion: uint64(v), X: []float64{0.2, 0.8}, Y: []float64{0.1, 0.7}})
					}
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// The report reads as a person reads it: results (headline numbers, summary table) come before
// the plots and the settings last; every plot fills the page's column at twice its resolution.
func TestReportLayout(t *testing.T) {
	dir := t.TempDir()
	r := Report{Title: "layout", Settings: [][2]string{{"learning rate", "1"}}, Results: layoutResults(), TargetFraction: 0.9, FinalLine: "speedup-to-target: 4x"}
	files, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, FileHTML))
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	order := []string{`<section id="results">`, `class="headline"`, `class="summary"`, `<section id="plots">`, `<section id="settings">`, `class="settings"`}
	last := -1
	for _, mark := range order {
		i := strings.Index(page, mark)
		if i < 0 {
			t.Fatalf("report.html lacks %s", mark)
		}
		if i < last {
			t.Errorf("%s comes before the part preceding it in %v", mark, order)
		}
		last = i
	}
	imgs := regexp.MustCompile(`<img class="plot" src="([^"]+)" width="(\d+)" height="(\d+)"`).FindAllStringSubmatch(page, -1)
	var pngs []string
	for _, f := range files {
		if strings.HasSuffix(f, ".png") {
			pngs = append(pngs, filepath.Base(f))
		}
	}
	if len(imgs) != len(pngs) || len(pngs) != len(reportPlots) {
		t.Fatalf("%d plot images on the page, %d PNGs written, %d plots", len(imgs), len(pngs), len(reportPlots))
	}
	for i, img := range imgs {
		if img[1] != pngs[i] || img[2] != fmt.Sprint(imgCSSWidth) || img[3] != fmt.Sprint(imgCSSHeight) {
			t.Errorf("image %d: %v, want %s at %d×%d", i, img[1:], pngs[i], imgCSSWidth, imgCSSHeight)
		}
		b, err := os.ReadFile(filepath.Join(dir, pngs[i]))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", pngs[i], err)
		}
		if wantH := PlotPixelWidth * imgCSSHeight / imgCSSWidth; cfg.Width != PlotPixelWidth || cfg.Height != wantH {
			t.Errorf("%s is %d×%d pixels, want %d×%d", pngs[i], cfg.Width, cfg.Height, PlotPixelWidth, wantH)
		}
	}
	if !strings.Contains(page, "max-width:"+fmt.Sprint(imgCSSWidth)+"px") || !strings.Contains(page, "img.plot{display:block;width:100%") {
		t.Error("the page's column is not as wide as its plots")
	}
	// Each arm's table swatch is its plot colour.
	for _, arm := range []string{sim.ArmRealGRPO, sim.ArmPureWM, sim.ArmWMRL, "my-arm"} {
		want := fmt.Sprintf(`<td><span class="sw" style="background:%s"></span>%s</td>`, swatch(arm), arm)
		if !strings.Contains(page, want) {
			t.Errorf("summary row of %s lacks its swatch %s", arm, swatch(arm))
		}
	}
	for _, want := range []string{"4.44×", "95% CI ± 0.00", "speedup to target (wmrl vs real-grpo)"} {
		if !strings.Contains(page, want) {
			t.Errorf("headline lacks %q", want)
		}
	}
	golden(t, "report_outline.golden", outline(page))
}

// outline is the page's headings and sections in order: the golden records the page's structure
// without its numbers.
func outline(page string) string {
	var b strings.Builder
	for _, m := range regexp.MustCompile(`<section id="[a-z]+">|<h[12]>[^<]*</h[12]>|<img class="plot" src="[^"]+"`).FindAllString(page, -1) {
		b.WriteString(m + "\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update after checking the change):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// Every element of every plot takes its colour from the one palette: an arm's lines, bands and
// points have sim.ArmColor(arm) (any opacity), everything else is grey; and the legend sits
// beside the data area, never over it.
func TestPlotColoursComeFromThePalette(t *testing.T) {
	r := Report{Results: layoutResults(), TargetFraction: 0.9, CalibrationArm: sim.ArmWMRL}
	arms := aggregate(r.Results)
	seen := map[string]map[string]bool{} // arm → plots it is drawn in
	for _, rp := range reportPlots {
		f, err := rp.make(r, arms)
		if err != nil {
			t.Fatalf("%s: %v", rp.name, err)
		}
		for _, s := range f.series {
			if s.arm == "" {
				if c := s.color; c.R != c.G || c.G != c.B {
					t.Errorf("%s: reference element %q has colour %v, not a grey", rp.name, s.label, s.color)
				}
				continue
			}
			want := sim.ArmColor(s.arm)
			if s.color.R != want.R || s.color.G != want.G || s.color.B != want.B {
				t.Errorf("%s: %q of arm %s has colour %v, the palette says %v", rp.name, s.label, s.arm, s.color, want)
			}
			if seen[s.arm] == nil {
				seen[s.arm] = map[string]bool{}
			}
			seen[s.arm][rp.name] = true
		}
		c := draw.New(vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI)))
		plotArea, legendArea := layout(f.Plot, c)
		data := f.DataCanvas(plotArea)
		if legendArea.Canvas == nil && len(f.series) == 0 {
			continue // nothing drawn (e.g. no arm of the kind the plot is about), no legend
		}
		if legendArea.Canvas == nil || legendArea.Min.X < data.Max.X || legendArea.Max.X > c.Max.X {
			t.Errorf("%s: legend %v overlaps the data area %v or leaves the image %v", rp.name, legendArea.Rectangle, data.Rectangle, c.Rectangle)
		}
		if w := data.Max.X - data.Min.X; w < plotWidth/2 {
			t.Errorf("%s: data area only %v of %v wide", rp.name, w, plotWidth)
		}
	}
	for _, arm := range []string{sim.ArmRealGRPO, sim.ArmPureWM, sim.ArmWMRL, "my-arm"} {
		if len(seen[arm]) < 2 {
			t.Errorf("arm %s is drawn in %d plots, want several: %v", arm, len(seen[arm]), seen[arm])
		}
	}
}

// Continuous axes are labelled at 5 to 10 round values.
func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		first  string
	}{
		{0.33, 0.68, "0.35"}, {0, 1, "0.0"}, {-0.06, 0.015, "-0.06"}, {0, 4.5, "0.0"}, {0.05, 0.23, "0.06"}, {1, 1920, "200"},
	} {
		var labels []string
		for _, tk := range (niceTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label == "" {
				continue
			}
			if tk.Value < tc.lo-1e-9 || tk.Value > tc.hi+1e-9 {
				t.Errorf("%v..%v: tick %v outside the range", tc.lo, tc.hi, tk.Value)
			}
			labels = append(labels, tk.Label)
		}
		if len(labels) < 4 || len(labels) > 11 || labels[0] != tc.first {
			t.Errorf("%v..%v: labels %v, want 4–11 starting at %s", tc.lo, tc.hi, labels, tc.first)
		}
	}
}
