package bench

import (
	"fmt"
	"slices"
	"strings"
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
	fmt.Fprintf(&b, "%-6s %14s %14s %7s %10s\n", "round", "pass rec/s", "corr rec/s", "ratio", "cpu ratio")
	for i, r := range rs {
		fmt.Fprintf(&b, "%-6d %14.0f %14.0f %7.3f %10.2f\n", i+1, r.PassThroughPerSec, r.CorrectionPerSec, r.Ratio,
			r.CorrectionCPU.Seconds()/r.PassThroughCPU.Seconds())
	}
	row := func(name, format string, f func(CorrectionReport) float64) {
		lo, med, hi := rs.Spread(f)
		fmt.Fprintf(&b, "%-22s min "+format+"  median "+format+"  max "+format+"\n", name, lo, med, hi)
	}
	row("pass-through rec/s", "%.0f", func(r CorrectionReport) float64 { return r.PassThroughPerSec })
	row("correction rec/s", "%.0f", func(r CorrectionReport) float64 { return r.CorrectionPerSec })
	row("ratio", "%.3f", func(r CorrectionReport) float64 { return r.Ratio })
	return b.String()
}
