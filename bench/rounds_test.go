package bench

import (
	"strings"
	"testing"
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
	if lo, med, hi := (CorrectionRounds{}).Spread(func(r CorrectionReport) float64 { return r.Ratio }); lo != 0 || med != 0 || hi != 0 {
		t.Error("no rounds: want zeros")
	}
}
