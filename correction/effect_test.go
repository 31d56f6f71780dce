package correction

import (
	"math"
	"testing"
)

// wmRow is an unmasked world-model row of group g with raw prediction p and
// the advantage the map gave it.
func wmRow(g string, p, adv float64) Row {
	return Row{GroupID: g, Source: SourceWorldModel, Predicted: p, PredictedOK: true, Mask: true, Advantage: adv}
}

func TestDebiasEffect(t *testing.T) {
	drCfg := DefaultConfig()
	drCfg.Advantage = DrGRPO
	grpo, dr := mustNew(t, DefaultConfig()), mustNew(t, drCfg)
	// Raw Dr.GRPO advantages of predictions 0.2, 0.4, 0.6 are −0.2, 0, +0.2.
	tests := []struct {
		name string
		c    *Corrector
		rows []Row
		want DebiasEffect
	}{
		{"empty", grpo, nil, DebiasEffect{}},
		{"identity map", dr, []Row{wmRow("a", 0.2, -0.2), wmRow("a", 0.4, 0), wmRow("a", 0.6, 0.2)},
			DebiasEffect{Rows: 3, Groups: 1}},
		{"stretched, same order", dr, []Row{wmRow("a", 0.2, -0.3), wmRow("a", 0.4, 0), wmRow("a", 0.6, 0.3)},
			DebiasEffect{Rows: 3, Groups: 1, MeanShift: (0.1 + 0 + 0.1) / 3}},
		{"tie created", dr, []Row{wmRow("a", 0.2, -0.1), wmRow("a", 0.4, -0.1), wmRow("a", 0.6, 0.2)},
			DebiasEffect{Rows: 3, Groups: 1, Reordered: 1, MeanShift: (0.1 + 0.1 + 0) / 3}},
		{"flattened", dr, []Row{wmRow("a", 0.2, 0), wmRow("a", 0.4, 0), wmRow("a", 0.6, 0)},
			DebiasEffect{Rows: 3, Groups: 1, Reordered: 1, Flattened: 1, MeanShift: 0.4 / 3}},
		{"constant group is not flattened", dr, []Row{wmRow("a", 0.5, 0), wmRow("a", 0.5, 0)},
			DebiasEffect{Rows: 2, Groups: 1}},
		{"anchor and masked rows ignored", dr, []Row{
			{GroupID: "a", Source: SourceAnchor, Predicted: 0.9, PredictedOK: true, Mask: true, Advantage: 5},
			{GroupID: "a", Source: SourceAnchor, Predicted: 0.1, PredictedOK: true, Mask: true, Advantage: -5},
			wmRow("b", 0.2, -0.2), {GroupID: "b", Source: SourceWorldModel}, wmRow("b", 0.6, 0.2),
			wmRow("c", 0.3, 0), {GroupID: "c", Source: SourceWorldModel}, // one usable row: masked group
		}, DebiasEffect{Rows: 2, Groups: 1}},
		{"grpo, two groups, one flattened", grpo, []Row{
			wmRow("a", 0.1, -0.99990001), wmRow("a", 0.3, 0.99990001),
			wmRow("b", 0.1, 0), wmRow("b", 0.3, 0),
		}, DebiasEffect{Rows: 4, Groups: 2, Reordered: 1, Flattened: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.c.DebiasEffect(tc.rows)
			want := tc.want
			if tc.name == "grpo, two groups, one flattened" {
				// Raw GRPO advantages are ±0.1/(0.1+1e-4); group a's shift is rounding only.
				z := 0.1 / (0.1 + 1e-4)
				want.MeanShift = (math.Abs(-0.99990001+z) + math.Abs(0.99990001-z) + 2*z) / 4
			}
			if got.Rows != want.Rows || got.Groups != want.Groups || got.Reordered != want.Reordered ||
				got.Flattened != want.Flattened || math.Abs(got.MeanShift-want.MeanShift) > 1e-12 {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// TestDebiasEffectOfRuns checks the effect on whole simulated runs: zero
// with OD off, and a pure function of the rows (equal on a second run).
func TestDebiasEffectOfRuns(t *testing.T) {
	off := DefaultConfig()
	off.Debias = false
	refOff := ReferenceConfig()
	refOff.Debias = false
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantZero bool
	}{
		{"off", off, true},
		{"isotonic", DefaultConfig(), false},
		{"zspace", ZSpaceConfig(), false},
		{"reference off", refOff, true}, // numpy arithmetic on both sides: exactly 0
		{"reference", ReferenceConfig(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, tc.cfg)
			rows, _ := run(t, c, simulate("run", "s", 80, 5))
			rows2, _ := run(t, c, simulate("run", "s", 80, 5))
			var total DebiasEffect
			for v := range rows {
				e, e2 := c.DebiasEffect(rows[v]), c.DebiasEffect(rows2[v])
				if e != e2 {
					t.Fatalf("step %d: effect %+v, then %+v", v, e, e2)
				}
				total.MeanShift += e.MeanShift
				total.Reordered += e.Reordered
				total.Groups += e.Groups
			}
			if total.Groups == 0 {
				t.Fatal("no world-model groups compared")
			}
			if zero := total.MeanShift == 0 && total.Reordered == 0; zero != tc.wantZero {
				t.Fatalf("effect over the run %+v, want zero: %v", total, tc.wantZero)
			}
		})
	}
}
