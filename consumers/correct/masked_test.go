package correct

import (
	"testing"

	"github.com/wmrl/wmrl/topics"
)

// TestMaskedCountsGate: world-model rows masked while the stream's trust gate is closed are
// counted as gated and left out of the share the warning watches; with the gate open (or absent)
// the same rows count as unexplained.
func TestMaskedCountsGate(t *testing.T) {
	rows := func() []topics.AdvantageRow {
		var out []topics.AdvantageRow
		for i := range 6 {
			out = append(out, topics.AdvantageRow{Stream: "a", Source: topics.SourceWorldModel, Mask: false, RolloutID: string(rune('a' + i))})
		}
		out = append(out, topics.AdvantageRow{Stream: "a", Source: topics.SourceAnchor, Mask: true},
			topics.AdvantageRow{Stream: "a", Source: topics.SourceAnchor, Mask: false})
		return out
	}
	for _, tc := range []struct {
		name  string
		gate  *topics.TrustGate
		gated int
		share float64
	}{
		{"closed", &topics.TrustGate{Closed: true, Pairs: 40}, 6, 0.5},
		{"open", &topics.TrustGate{Pairs: 40, Rho: 0.8}, 0, 7.0 / 8},
		{"no gate", nil, 0, 7.0 / 8},
	} {
		s := &sealed{rows: rows(), snaps: []topics.CalibrationSnapshot{{Stream: "a", Gate: tc.gate}}}
		n := maskedCounts(s)["a"]
		if n.rows != 8 || n.masked != 7 || n.gated != tc.gated || n.unexplained() != tc.share {
			t.Errorf("%s: %+v, unexplained %v; want 8 rows, 7 masked, %d gated, share %v", tc.name, *n, n.unexplained(), tc.gated, tc.share)
		}
	}
	if (maskedCount{rows: 4, masked: 4, gated: 4}).unexplained() != 0 {
		t.Error("a step of gated rows only is not unexplained")
	}
}
