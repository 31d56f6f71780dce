package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// StepsHeader is the header of WriteStepsCSV.
var StepsHeader = []string{
	"arm", "seed", "step", "score", "executions", "exec_seconds", "exec_overhead_seconds",
	"predictions", "wm_seconds", "anchor_groups", "calibration_mae", "raw_mae", "anchor_weight",
	"noise_ratio", "fit_version", "pairs", "entropy", "debias_shift", "gate", "gate_rho", "gate_pairs",
}

// WriteStepsCSV writes one row per arm × seed × step (step −1 is the untrained policy), the raw
// learning curves every summary is computed from.
func WriteStepsCSV(w io.Writer, results []Result) error {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 10, 64) }
	var rows [][]string
	for _, r := range results {
		seed := strconv.FormatInt(r.Seed, 10)
		nan := f(math.NaN())
		rows = append(rows, []string{r.Arm, seed, "-1", f(r.InitialScore), "0", "0", "0", "0", "0", "0", nan, nan, "1", "0", "0", "0", nan, "0", "", "", ""})
		for _, s := range r.Steps {
			rows = append(rows, []string{
				r.Arm, seed, strconv.Itoa(s.Step), f(s.Score), strconv.Itoa(s.Executions),
				f(s.ExecCompute.Seconds()), f(s.ExecOverhead.Seconds()), strconv.Itoa(s.Predictions),
				f(s.WMCompute.Seconds()), strconv.Itoa(s.AnchorGroups), f(s.CalibrationMAE), f(s.RawMAE),
				f(s.AnchorWeight), f(s.NoiseRatio), strconv.FormatUint(s.FitVersion, 10),
				strconv.Itoa(s.Pairs), f(s.Entropy), f(s.DebiasShift),
				s.GateLabel(), f(s.Gate.Rho), strconv.Itoa(s.Gate.N),
			})
		}
	}
	return writeCSV(w, StepsHeader, rows)
}

// writeCSV writes the header and rows of every CSV of this package.
func writeCSV(w io.Writer, header []string, rows [][]string) error {
	if err := csv.NewWriter(w).WriteAll(append([][]string{header}, rows...)); err != nil {
		return fmt.Errorf("sim: csv: %w", err)
	}
	return nil
}

// csvFloat is a summary CSV's number: 8 significant digits.
func csvFloat(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }

// summaryColumn is one quantity of the summary CSV: a mean column and, when the estimate has a
// confidence interval, a ci95 column beside it.
type summaryColumn struct {
	name string
	get  func(ArmSummary) Estimate
	ci   bool
}

var summaryColumns = []summaryColumn{
	{"final", func(s ArmSummary) Estimate { return s.Final }, true},
	{"final_minus_real", func(s ArmSummary) Estimate { return s.FinalDelta }, true},
	{"executions_to_target", func(s ArmSummary) Estimate { return s.ExecutionsToTarget }, true},
	{"exec_seconds_to_target", func(s ArmSummary) Estimate { return s.ExecSecondsToTarget }, true},
	{"total_seconds_to_target", func(s ArmSummary) Estimate { return s.TotalSecondsToTarget }, true},
	{"steps_to_target", func(s ArmSummary) Estimate { return s.StepsToTarget }, true},
	{"speedup", func(s ArmSummary) Estimate { return s.Speedup }, true},
	{"executions_total", func(s ArmSummary) Estimate { return s.Executions }, false},
	{"gate_closed", func(s ArmSummary) Estimate { return s.GateClosed }, true},
}

// SummaryHeader is the header of WriteSummaryCSV for sums: "arm", "seeds", "reached", then per
// quantity "<q>_mean" and, only if some arm has a confidence interval for it (two or more
// values), "<q>_ci95"; "speedup_n" follows the speedup.
func SummaryHeader(sums []ArmSummary) []string {
	h := []string{"arm", "seeds", "reached"}
	for _, c := range summaryColumns {
		h = append(h, c.name+"_mean")
		if c.ci && hasCI(sums, c) {
			h = append(h, c.name+"_ci95")
		}
		if c.name == "speedup" {
			h = append(h, "speedup_n")
		}
	}
	return h
}

func hasCI(sums []ArmSummary, c summaryColumn) bool {
	for _, s := range sums {
		if ci := c.get(s).CI; !math.IsNaN(ci) {
			return true
		}
	}
	return false
}

// WriteSummaryCSV writes one row per arm. CI columns are 95% half-widths (Student t over seeds);
// a CI column is left out when no arm has one (a single seed), and a cell is empty where its
// arm's estimate has fewer than two values. An undefined mean (no seed reached the target) is
// empty too.
func WriteSummaryCSV(w io.Writer, sums []ArmSummary) error {
	f := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return csvFloat(x)
	}
	withCI := make([]bool, len(summaryColumns))
	for i, c := range summaryColumns {
		withCI[i] = c.ci && hasCI(sums, c)
	}
	var rows [][]string
	for _, s := range sums {
		row := []string{s.Arm, strconv.Itoa(s.Seeds), strconv.Itoa(s.Reached)}
		for i, c := range summaryColumns {
			e := c.get(s)
			row = append(row, f(e.Mean))
			if withCI[i] {
				row = append(row, f(e.CI))
			}
			if c.name == "speedup" {
				row = append(row, strconv.Itoa(e.N))
			}
		}
		rows = append(rows, row)
	}
	return writeCSV(w, SummaryHeader(sums), rows)
}

// FormatSpeedup is the speedup column of the summary tables: "mean ± ci", or ∞ when the arm
// reached the target without executing (then no seed has a ratio).
func (s ArmSummary) FormatSpeedup() string {
	if s.Reached > 0 && s.Speedup.N == 0 {
		return "∞"
	}
	return s.Speedup.Format(2)
}

// TableLegend defines every column of WriteTable, for a target of targetFraction × real-GRPO.
func TableLegend(targetFraction float64) string {
	return fmt.Sprintf(`columns (mean ± 95%% CI over seeds, Student t, where there are two or more values):
  final       expected true score on the held-out problems after the last step
  Δ real      final minus real-GRPO's final score in the same seed
  reached     seeds in which the arm reached the target (%.0f%% of real-GRPO's final score)
  execs→tgt   real executions until the target was first reached (seeds that reached it)
  exec s→tgt  measured wall time of those executions, seconds
  speedup     real-GRPO's execs→tgt / the arm's, per seed (∞: reached without executing)
  execs       real executions of the whole run
`, 100*targetFraction)
}

// WriteTable prints the summary as an aligned text table (under 100 columns for seeds' CIs up to
// four digits) followed by TableLegend.
func WriteTable(w io.Writer, sums []ArmSummary, targetFraction float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tfinal\tΔ real\treached\texecs→tgt\texec s→tgt\tspeedup\texecs")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", s.Arm, s.Final.Format(3), s.FinalDelta.Format(3),
			s.Reached, s.Seeds, s.ExecutionsToTarget.Format(0), s.ExecSecondsToTarget.Format(2), s.FormatSpeedup(), s.Executions.Format(0))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("sim: table: %w", err)
	}
	if _, err := io.WriteString(w, TableLegend(targetFraction)); err != nil {
		return fmt.Errorf("sim: table: %w", err)
	}
	return nil
}
