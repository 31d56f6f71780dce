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
	"noise_ratio", "fit_version", "pairs", "entropy",
}

// WriteStepsCSV writes one row per arm × seed × step (step −1 is the untrained policy), the raw
// learning curves every summary is computed from.
func WriteStepsCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(StepsHeader); err != nil {
		return fmt.Errorf("sim: csv: %w", err)
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 10, 64) }
	for _, r := range results {
		seed := strconv.FormatInt(r.Seed, 10)
		nan := f(math.NaN())
		if err := cw.Write([]string{r.Arm, seed, "-1", f(r.InitialScore), "0", "0", "0", "0", "0", "0", nan, nan, "1", "0", "0", "0", nan}); err != nil {
			return fmt.Errorf("sim: csv: %w", err)
		}
		for _, s := range r.Steps {
			row := []string{
				r.Arm, seed, strconv.Itoa(s.Step), f(s.Score), strconv.Itoa(s.Executions),
				f(s.ExecCompute.Seconds()), f(s.ExecOverhead.Seconds()), strconv.Itoa(s.Predictions),
				f(s.WMCompute.Seconds()), strconv.Itoa(s.AnchorGroups), f(s.CalibrationMAE), f(s.RawMAE),
				f(s.AnchorWeight), f(s.NoiseRatio), strconv.FormatUint(s.FitVersion, 10),
				strconv.Itoa(s.Pairs), f(s.Entropy),
			}
			if err := cw.Write(row); err != nil {
				return fmt.Errorf("sim: csv: %w", err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("sim: csv: %w", err)
	}
	return nil
}

// SummaryHeader is the header of WriteSummaryCSV.
var SummaryHeader = []string{
	"arm", "seeds", "reached", "final_mean", "final_ci95", "final_minus_real_mean", "final_minus_real_ci95",
	"executions_to_target_mean", "executions_to_target_ci95", "exec_seconds_to_target_mean",
	"exec_seconds_to_target_ci95", "total_seconds_to_target_mean", "total_seconds_to_target_ci95",
	"steps_to_target_mean", "steps_to_target_ci95", "speedup_mean", "speedup_ci95", "speedup_n",
	"executions_total_mean",
}

// WriteSummaryCSV writes one row per arm (CI columns are 95% half-widths, NaN when undefined).
func WriteSummaryCSV(w io.Writer, sums []ArmSummary) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SummaryHeader); err != nil {
		return fmt.Errorf("sim: csv: %w", err)
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }
	for _, s := range sums {
		row := []string{
			s.Arm, strconv.Itoa(s.Seeds), strconv.Itoa(s.Reached),
			f(s.Final.Mean), f(s.Final.CI), f(s.FinalDelta.Mean), f(s.FinalDelta.CI),
			f(s.ExecutionsToTarget.Mean), f(s.ExecutionsToTarget.CI),
			f(s.ExecSecondsToTarget.Mean), f(s.ExecSecondsToTarget.CI),
			f(s.TotalSecondsToTarget.Mean), f(s.TotalSecondsToTarget.CI),
			f(s.StepsToTarget.Mean), f(s.StepsToTarget.CI),
			f(s.Speedup.Mean), f(s.Speedup.CI), strconv.Itoa(s.Speedup.N), f(s.Executions.Mean),
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("sim: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("sim: csv: %w", err)
	}
	return nil
}

// WriteTable prints the summary as an aligned text table.
func WriteTable(w io.Writer, sums []ArmSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "arm\tfinal score\tΔ vs real-GRPO\treached\texecutions-to-target\texec s-to-target\texec+overhead+wm s\tspeedup (execs)\texecutions total")
	for _, s := range sums {
		speed := s.Speedup.Format(2)
		if s.Reached > 0 && s.Speedup.N == 0 {
			speed = "∞ (no executions)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", s.Arm, s.Final.Format(3), s.FinalDelta.Format(3),
			s.Reached, s.Seeds, s.ExecutionsToTarget.Format(0), s.ExecSecondsToTarget.Format(2), s.TotalSecondsToTarget.Format(2), speed,
			s.Executions.Format(0))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("sim: table: %w", err)
	}
	return nil
}
