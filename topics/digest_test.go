package topics

import (
	"math"
	"testing"
)

func digestRowsFixture() []AdvantageRow {
	return []AdvantageRow{
		{RunID: "r1", Stream: "s", Step: 1, GroupID: "g1", RolloutID: "b", Source: SourceWorldModel, Predicted: 0.5, PredictedOK: true, Calibrated: 0.4, Used: 0.4, Advantage: -1, Weight: 1, Mask: true, CalibrationVersion: 2},
		{RunID: "r1", Stream: "s", Step: 1, GroupID: "g1", RolloutID: "a", Source: SourceWorldModel, Predicted: 0.7, PredictedOK: true, Calibrated: 0.6, Used: 0.6, Advantage: 1, Weight: 1, Mask: true, CalibrationVersion: 2},
		{RunID: "r1", Stream: "s", Step: 0, GroupID: "g0", RolloutID: "a", Source: SourceAnchor, Executed: 0.9, ExecutedOK: true, Used: 0.9, Weight: 2},
	}
}

func TestDigestOrderIndependent(t *testing.T) {
	rows := digestRowsFixture()
	want := DigestRows(rows)
	rev := []AdvantageRow{rows[2], rows[0], rows[1]}
	if got := DigestRows(rev); got != want {
		t.Fatalf("digest depends on input order: %s vs %s", got, want)
	}
	if rows[0].RolloutID != "b" {
		t.Fatal("DigestRows reordered its input")
	}
}

func TestDigestSensitive(t *testing.T) {
	base := DigestRows(digestRowsFixture())
	mods := map[string]func(*AdvantageRow){
		"advantage ulp": func(r *AdvantageRow) { r.Advantage = math.Nextafter(r.Advantage, 2) },
		"weight":        func(r *AdvantageRow) { r.Weight = 1.5 },
		"mask":          func(r *AdvantageRow) { r.Mask = false },
		"version":       func(r *AdvantageRow) { r.CalibrationVersion++ },
		"rollout id":    func(r *AdvantageRow) { r.RolloutID = "c" },
		"predicted ok":  func(r *AdvantageRow) { r.PredictedOK = false },
	}
	for name, mod := range mods {
		rows := digestRowsFixture()
		mod(&rows[0])
		if DigestRows(rows) == base {
			t.Errorf("%s: digest unchanged", name)
		}
	}
	// A value behind a false OK flag is not part of the row's meaning.
	rows := digestRowsFixture()
	rows[2].Predicted = 0.123
	if DigestRows(rows) != base {
		t.Error("digest depends on a predicted value whose OK flag is false")
	}
}

func TestDigestEmpty(t *testing.T) {
	// SHA-256 of nothing: an empty run has a well-defined digest.
	if got := DigestRows(nil); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatal(got)
	}
}
