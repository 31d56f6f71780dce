package sim

import (
	"bytes"
	"encoding/csv"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestGridOutputs builds cells from synthetic runs and checks that the CSV
// and the Markdown table report what Summarize computes for each cell.
func TestGridOutputs(t *testing.T) {
	mk := func(arm string, seed int64, final float64) Result {
		return Result{Arm: arm, Seed: seed, InitialScore: 0.1, Steps: []StepRecord{
			{Step: 0, Score: final / 2, Executions: 10}, {Step: 1, Score: final, Executions: 20},
		}}
	}
	var cells []GridCell
	for _, b := range []float64{0, 0.3} {
		for _, n := range []float64{0, 0.3} {
			var rs []Result
			for seed := int64(1); seed <= 3; seed++ {
				rs = append(rs, mk(ArmRealGRPO, seed, 0.6), mk(ArmPureWM, seed, 0.6-b-n+0.01*float64(seed)))
			}
			cells = append(cells, GridCell{Bias: b, Noise: n, Results: rs, Summary: Summarize(rs, 0.9)})
		}
	}
	var buf bytes.Buffer
	if err := WriteErrorGridCSV(&buf, cells); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+4*2 || strings.Join(recs[0], ",") != strings.Join(GridHeader, ",") {
		t.Fatalf("csv: %d records, header %v", len(recs), recs[0])
	}
	for i, rec := range recs[1:] {
		c := cells[i/2]
		s := c.Summary[i%2]
		mean, _ := strconv.ParseFloat(rec[4], 64)
		delta, _ := strconv.ParseFloat(rec[6], 64)
		if rec[2] != s.Arm || !closeTo(mean, s.Final.Mean, 1e-7) || !closeTo(delta, s.FinalDelta.Mean, 1e-7) {
			t.Fatalf("row %d %v: want arm %s final %v delta %v", i, rec, s.Arm, s.Final.Mean, s.FinalDelta.Mean)
		}
	}
	buf.Reset()
	if err := GridTable(&buf, cells); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"σ = 0 ", "σ = 0.3 ", "| B = 0 | B = 0.3 |", "| pure-wm |", cells[3].Summary[1].FinalDelta.Format(3)} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	files, err := WriteGridPlots(t.TempDir(), cells)
	if err != nil {
		t.Fatal(err)
	}
	// One heat map per arm but real-GRPO, one line plot per noise level.
	if len(files) != 1+2 {
		t.Fatalf("plots %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("plot %s: %v", f, err)
		}
	}
}

func closeTo(a, b, tol float64) bool { return a-b <= tol && b-a <= tol }
