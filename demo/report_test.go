package demo

import (
	"bytes"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/sim"
)

var keepReport = flag.String("keep-report", "", "also write the test report into this directory")

func TestWriteReport(t *testing.T) {
	ctx := testContext(t)
	eval, err := sim.Eval(ctx, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Steps, cfg.Groups, cfg.GroupSize = 16, 4, 8
	arms, err := sim.ArmsByName([]string{sim.ArmPureWM, sim.ArmWMRL}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Sweep{Config: cfg, Arms: arms, Seeds: []int64{1, 2}}.Run(ctx, eval, nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir()}
	if *keepReport != "" {
		dirs = append(dirs, *keepReport)
	}
	for _, dir := range dirs {
		files, err := WriteReport(dir, Report{Title: "test", Settings: SimSettings(cfg), Results: res, TargetFraction: 0.9, FinalLine: "speedup-to-target: 1x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 10 {
			t.Fatalf("wrote %v", files)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(f, ".png") {
				img, err := png.Decode(bytes.NewReader(b))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if img.Bounds().Dx() < 400 {
					t.Fatalf("%s: %v", f, img.Bounds())
				}
			}
		}
		html, err := os.ReadFile(filepath.Join(dir, FileHTML))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"real-grpo", "pure-wm", "wmrl", FileScore, FileScoreSteps, FileGap, FileCalibration, FileCalError, FileIVD, FileDebias,
			"speedup-to-target: 1x", "mean ± 95% CI over 2 seeds", "world model: read-out floor</th><td>0.1<"} {
			if !bytes.Contains(html, []byte(want)) {
				t.Errorf("report.html lacks %q", want)
			}
		}
		// A settings value is a plain value, never a dumped Go struct.
		for _, row := range SimSettings(cfg) {
			if strings.ContainsAny(row[1], "{}") {
				t.Errorf("setting %q is %q", row[0], row[1])
			}
		}
	}
	if _, err := WriteReport(t.TempDir(), Report{}); err == nil {
		t.Fatal("empty report: no error")
	}
}

// Step axes are labelled with integers, however few steps there are.
func TestStepTicksAreIntegers(t *testing.T) {
	for _, hi := range []float64{1, 3, 25, 80, 1920} {
		ticks := stepTicks{}.Ticks(0, hi)
		if len(ticks) < 2 {
			t.Fatalf("0..%v: %d ticks", hi, len(ticks))
		}
		for _, tk := range ticks {
			if tk.Value != math.Trunc(tk.Value) || strings.Contains(tk.Label, ".") {
				t.Errorf("0..%v: tick %v labelled %q", hi, tk.Value, tk.Label)
			}
		}
	}
}

// A one-seed report has no confidence intervals, so summary.csv has no CI columns.
func TestOneSeedSummaryHasNoCIColumns(t *testing.T) {
	res := []sim.Result{
		{Arm: sim.ArmRealGRPO, Seed: 1, InitialScore: 0.2, Steps: []sim.StepRecord{{Step: 0, Score: 0.5, Executions: 64, RawMAE: math.NaN(), CalibrationMAE: math.NaN()}}},
		{Arm: sim.ArmWMRL, Seed: 1, InitialScore: 0.2, Steps: []sim.StepRecord{{Step: 0, Score: 0.5, Executions: 16, RawMAE: 0.2, CalibrationMAE: 0.1, AnchorWeight: 1}}},
	}
	dir := t.TempDir()
	if _, err := WriteReport(dir, Report{Title: "one seed", Results: res, TargetFraction: 0.9}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileSummaryCSV))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("ci95")) || bytes.Contains(b, []byte("NaN")) {
		t.Fatalf("summary.csv:\n%s", b)
	}
}
