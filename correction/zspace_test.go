package correction

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestFitZSpace(t *testing.T) {
	lin := make([]pair, 120)
	dec := make([]pair, 120)
	for i := range lin {
		z := float64(i)/40 - 1.5
		lin[i], dec[i] = unitPair(z, 0.5*z), unitPair(z, -z)
	}
	constant := []pair{{0, -1, 1}, {0, 0, 1}, {0, 1, 1}, {0, 2, 1}}
	tests := []struct {
		name  string
		ps    []pair
		bins  int
		wantN int
		check func(bx, by []float64) bool
	}{
		{"constant z_wm gives no map", constant, 12, 0, nil},
		{"linear: bin means on the line", lin, 12, 12, func(bx, by []float64) bool {
			for i := range bx {
				if math.Abs(by[i]-0.5*bx[i]) > 1e-12 {
					return false
				}
			}
			return true
		}},
		{"decreasing pools to one value", dec, 4, 4, func(_, by []float64) bool {
			return by[0] == by[3] && math.Abs(by[0]-0.0125) < 1e-12 // the mean of −z
		}},
		{"two distinct x, two bins", []pair{{-1, -2, 1}, {-1, -1, 1}, {1, 1, 1}, {1, 2, 1}}, 12, 2, func(bx, by []float64) bool {
			return slices.Equal(bx, []float64{-1, 1}) && slices.Equal(by, []float64{-1.5, 1.5})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bx, by := fitZSpace(tc.ps, tc.bins)
			if len(bx) != tc.wantN || len(by) != tc.wantN {
				t.Fatalf("%d/%d breakpoints, want %d: %v %v", len(bx), len(by), tc.wantN, bx, by)
			}
			for i := 1; i < len(bx); i++ {
				if !(bx[i] > bx[i-1]) || by[i] < by[i-1] {
					t.Fatalf("not monotone at %d: %v %v", i, bx, by)
				}
			}
			if tc.check != nil && !tc.check(bx, by) {
				t.Fatalf("breakpoints %v %v", bx, by)
			}
		})
	}
}

// TestZSpaceMap: world-model rewards stay raw, the window holds standardised
// pairs, world-model advantages move once φ is fitted, and the run is
// deterministic: independent of arrival order, equal under Correct, Advance
// and CorrectRetire, and reproduced from its encoding.
func TestZSpaceMap(t *testing.T) {
	for _, est := range []AdvantageKind{GRPO, DrGRPO} {
		t.Run(est.String(), func(t *testing.T) {
			cfg := ZSpaceConfig()
			cfg.Advantage = est
			c := mustNew(t, cfg)
			steps := simulate("run", "s", 60, 7)
			rowsA, stA := run(t, c, steps)
			r := &splitMix64{s: 5}
			perm := make([]Step, len(steps))
			for i, s := range steps {
				perm[i] = shuffled(s, r)
			}
			rowsB, stB := run(t, c, perm)
			st := c.NewState("run", "s")
			var rowsC [][]Row
			for _, s := range steps {
				rows, next, err := c.CorrectRetire(st, s, nil)
				if err != nil {
					t.Fatal(err)
				}
				rowsC, st = append(rowsC, rows), next
			}
			if stA.Digest() != stB.Digest() || stA.Digest() != st.Digest() {
				t.Fatal("state digest depends on arrival order or on the entry point")
			}
			for v := range rowsA {
				if !slices.Equal(rowsA[v], rowsB[v]) || !slices.Equal(rowsA[v], rowsC[v]) {
					t.Fatalf("step %d rows differ between runs", v)
				}
			}
			if stA.FitVersion() == 0 {
				t.Fatal("run too short to fit φ")
			}
			var mean float64
			for _, p := range stA.win.pairs() {
				mean += p.x
			}
			if mean /= float64(stA.Pairs()); math.Abs(mean) > 1e-9 {
				t.Fatalf("window mean z_wm %v: pairs are not standardised", mean)
			}
			moved := false
			for _, rows := range rowsA {
				for _, row := range rows {
					if row.Source == SourceWorldModel && row.Calibrated != row.Predicted && row.PredictedOK {
						t.Fatalf("z-space map changed a reward: %+v", row)
					}
				}
				moved = moved || c.DebiasEffect(rows).MeanShift > 0
			}
			if !moved {
				t.Fatal("φ never moved a world-model advantage")
			}
			enc := stA.Encode()
			dec, err := DecodeState(enc)
			if err != nil || !slices.Equal(dec.Encode(), enc) || dec.Config() != cfg {
				t.Fatalf("round trip: %v", err)
			}
			// The decoded state continues exactly as the original.
			more := simulate("run", "s", 70, 7)[60:]
			r1, _ := runFrom(t, c, stA, more)
			r2, _ := runFrom(t, c, dec, more)
			for v := range r1 {
				if !slices.Equal(r1[v], r2[v]) {
					t.Fatalf("step %d after decode differs", 60+v)
				}
			}
		})
	}
}

// TestZSpaceConfig: the map kind is in the config hash, so a state made
// under another map refuses to advance, and the z-space map is default-mode
// only with at least 2 bins.
func TestZSpaceConfig(t *testing.T) {
	z, iso, cen := ZSpaceConfig(), DefaultConfig(), DefaultConfig()
	cen.Map = MapCentred
	isoBins := iso
	isoBins.Bins, isoBins.MinPairs = z.Bins, z.MinPairs
	if z.Hash() == isoBins.Hash() || z.Hash() == cen.Hash() {
		t.Fatal("map kind does not enter the config hash")
	}
	st := mustNew(t, isoBins).NewState("run", "s")
	if _, _, err := mustNew(t, z).Correct(st, Step{Run: "run", Stream: "s"}); !errors.Is(err, ErrConfigMismatch) {
		t.Fatalf("state of another map: %v", err)
	}
	ref := ReferenceConfig()
	ref.Map = MapZSpace
	oneBin := ZSpaceConfig()
	oneBin.Bins = 1
	for _, bad := range []Config{ref, oneBin} {
		if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	for _, k := range MapKinds {
		if got, err := ParseMapKind(k.String()); err != nil || got != k {
			t.Fatalf("ParseMapKind(%q) = %v, %v", k, got, err)
		}
	}
	if _, err := ParseMapKind("binned"); !errors.Is(err, ErrUnknownMap) {
		t.Fatalf("unknown map: %v", err)
	}
}

func runFrom(t *testing.T, c *Corrector, st *State, steps []Step) ([][]Row, *State) {
	t.Helper()
	var all [][]Row
	for _, s := range steps {
		rows, next, err := c.Correct(st, s)
		if err != nil {
			t.Fatalf("step %d: %v", s.Step, err)
		}
		all, st = append(all, rows), next
	}
	return all, st
}
