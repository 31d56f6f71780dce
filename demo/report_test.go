package demo

import (
	"bytes"
	"flag"
	"image/png"
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
	res, err := sim.Sweep{Config: cfg, Arms: arms, Seeds: []int64{1}}.Run(ctx, eval, nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir()}
	if *keepReport != "" {
		dirs = append(dirs, *keepReport)
	}
	for _, dir := range dirs {
		files, err := WriteReport(dir, Report{Title: "test", Results: res, TargetFraction: 0.9, FinalLine: "speedup-to-target: 1x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 7 {
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
		for _, want := range []string{"real-grpo", "pure-wm", "wmrl", FileScore, FileCalibration, FileIVD, "speedup-to-target: 1x"} {
			if !bytes.Contains(html, []byte(want)) {
				t.Errorf("report.html lacks %q", want)
			}
		}
	}
	if _, err := WriteReport(t.TempDir(), Report{}); err == nil {
		t.Fatal("empty report: no error")
	}
}
