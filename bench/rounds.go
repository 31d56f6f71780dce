package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CorrectionRounds are the reports of rounds of Correction run back to back on one broker, each
// pass-through then correction on fresh topics: on a shared machine one round's ratio moves by
// ±30 %, so a verdict takes the median of several alternating rounds.
type CorrectionRounds []CorrectionReport

// Spread is the minimum, median and maximum of f over the rounds.
func (rs CorrectionRounds) Spread(f func(CorrectionReport) float64) (lo, med, hi float64) {
	if len(rs) == 0 {
		return 0, 0, 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[0], med, v[len(v)-1]
}

// MedianRatio is the median of the rounds' correction / pass-through ratios.
func (rs CorrectionRounds) MedianRatio() float64 {
	_, med, _ := rs.Spread(func(r CorrectionReport) float64 { return r.Ratio })
	return med
}

func (rs CorrectionRounds) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d alternating rounds (pass-through, then correction, each on fresh topics):\n", len(rs))
	fmt.Fprintf(&b, "%-6s %14s %14s %7s %10s %13s %13s %9s\n", "round", "pass rec/s", "corr rec/s", "ratio", "cpu ratio",
		"pass cpu µs/r", "corr cpu µs/r", "calib B/s")
	for i, r := range rs {
		fmt.Fprintf(&b, "%-6d %14.0f %14.0f %7.3f %10.2f %13.2f %13.2f %9.0f\n", i+1, r.PassThroughPerSec, r.CorrectionPerSec, r.Ratio,
			r.CPURatio(), r.cpuPerRecord(r.PassThroughCPU), r.cpuPerRecord(r.CorrectionCPU), r.CalibrationBytesPerStep)
	}
	row := func(name, format string, f func(CorrectionReport) float64) {
		lo, med, hi := rs.Spread(f)
		fmt.Fprintf(&b, "%-22s min "+format+"  median "+format+"  max "+format+"\n", name, lo, med, hi)
	}
	row("pass-through rec/s", "%.0f", func(r CorrectionReport) float64 { return r.PassThroughPerSec })
	row("correction rec/s", "%.0f", func(r CorrectionReport) float64 { return r.CorrectionPerSec })
	row("ratio", "%.3f", func(r CorrectionReport) float64 { return r.Ratio })
	// Process CPU moves less than wall time with the other load of a shared machine.
	row("cpu ratio", "%.2f", CorrectionReport.CPURatio)
	row("pass cpu µs/record", "%.2f", func(r CorrectionReport) float64 { return r.cpuPerRecord(r.PassThroughCPU) })
	row("corr cpu µs/record", "%.2f", func(r CorrectionReport) float64 { return r.cpuPerRecord(r.CorrectionCPU) })
	row("calib B/(run,stream)", "%.0f", func(r CorrectionReport) float64 { return r.CalibrationBytesPerStep })
	return b.String()
}

// CPURatio is the correction phase's process CPU over the pass-through's (issue 38's goal: ≤ 1.5).
func (r CorrectionReport) CPURatio() float64 {
	if r.PassThroughCPU <= 0 {
		return 0
	}
	return r.CorrectionCPU.Seconds() / r.PassThroughCPU.Seconds()
}

func (r CorrectionReport) cpuPerRecord(d time.Duration) float64 {
	if r.Records == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(r.Records)
}
