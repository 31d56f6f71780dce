package bench

import (
	"strings"
	"testing"
	"time"
)

func TestCorrectionRoundsSpread(t *testing.T) {
	rs := CorrectionRounds{{Ratio: 0.9}, {Ratio: 0.5}, {Ratio: 0.7}}
	if lo, med, hi := rs.Spread(func(r CorrectionReport) float64 { return r.Ratio }); lo != 0.5 || med != 0.7 || hi != 0.9 {
		t.Errorf("odd count: got %v %v %v, want 0.5 0.7 0.9", lo, med, hi)
	}
	rs = append(rs, CorrectionReport{Ratio: 0.6})
	if got := rs.MedianRatio(); got < 0.6499 || got > 0.6501 {
		t.Errorf("even count: median %v, want 0.65 (mean of the middle two)", got)
	}
	if s := rs.String(); !strings.Contains(s, "4 alternating rounds") || !strings.Contains(s, "median 0.650") {
		t.Errorf("summary does not state the rounds and the median ratio:\n%s", s)
	}
	cpu := CorrectionRounds{
		{Records: 1000, PassThroughCPU: time.Millisecond, CorrectionCPU: 3 * time.Millisecond},
		{Records: 1000, PassThroughCPU: 2 * time.Millisecond, CorrectionCPU: 3 * time.Millisecond},
		{Records: 1000, PassThroughCPU: 2 * time.Millisecond, CorrectionCPU: 2 * time.Millisecond},
	}
	if s := cpu.String(); !strings.Contains(s, "cpu ratio              min 1.00  median 1.50  max 3.00") ||
		!strings.Contains(s, "corr cpu µs/record     min 2.00  median 3.00  max 3.00") {
		t.Errorf("summary does not state the CPU spread:\n%s", s)
	}
	if got := (CorrectionReport{}).CPURatio(); got != 0 {
		t.Errorf("no pass-through CPU: ratio %v, want 0", got)
	}
	if lo, med, hi := (CorrectionRounds{}).Spread(func(r CorrectionReport) float64 { return r.Ratio }); lo != 0 || med != 0 || hi != 0 {
		t.Error("no rounds: want zeros")
	}
}
