package correction

import (
	"errors"
	"slices"
	"testing"
)

// naiveCentred is centred isotonic regression written the slow, obvious
// way: pool equal x, run PAV with a stack of blocks holding their points,
// emit each block at the mean x of its points.
func naiveCentred(ps []pair) (bx, by []float64) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, cmpPair)
	type block struct{ xs, ys []float64 }
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	var st []block
	for i := 0; i < len(ps); {
		j := i
		var b block
		for j < len(ps) && ps[j].x == ps[i].x {
			b.xs, b.ys = append(b.xs, ps[j].x), append(b.ys, ps[j].y)
			j++
		}
		i = j
		st = append(st, b)
		for len(st) > 1 && mean(st[len(st)-2].ys) >= mean(st[len(st)-1].ys) {
			top := st[len(st)-1]
			st = st[:len(st)-1]
			st[len(st)-1].xs = append(st[len(st)-1].xs, top.xs...)
			st[len(st)-1].ys = append(st[len(st)-1].ys, top.ys...)
		}
	}
	for _, b := range st {
		bx, by = append(bx, mean(b.xs)), append(by, mean(b.ys))
	}
	return bx, by
}

func TestCentredMap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Map, cfg.MinPairs, cfg.Window = MapCentred, 20, 400
	c := mustNew(t, cfg)
	iso := DefaultConfig()
	iso.MinPairs, iso.Window = 20, 400
	ci := mustNew(t, iso)
	steps := simulate("run", "s", 30, 31)
	st, sti := c.NewState("run", "s"), ci.NewState("run", "s")
	sawFlat := false
	for _, s := range steps {
		var err error
		if _, err = c.Advance(st, s, nil); err != nil {
			t.Fatal(err)
		}
		if _, err = ci.Advance(sti, s, nil); err != nil {
			t.Fatal(err)
		}
		if st.FitVersion() == 0 {
			continue
		}
		bx, by := st.Breakpoints()
		wx, wy := naiveCentred(st.win.pairs())
		if len(bx) != len(wx) {
			t.Fatalf("step %d: %d breakpoints, naive %d", s.Step, len(bx), len(wx))
		}
		for i := range bx {
			if !closeTo(bx[i], wx[i], 1e-12) || !closeTo(by[i], wy[i], 1e-12) {
				t.Fatalf("step %d breakpoint %d: (%v, %v), naive (%v, %v)", s.Step, i, bx[i], by[i], wx[i], wy[i])
			}
			if i > 0 && !(bx[i] > bx[i-1] && by[i] > by[i-1]) {
				t.Fatalf("step %d: breakpoints not strictly increasing at %d", s.Step, i)
			}
		}
		// Strictly increasing between the outer centres, where the plain
		// isotonic map of the same window has flat stretches.
		for k := 1; k < 200; k++ {
			lo := bx[0] + (bx[len(bx)-1]-bx[0])*float64(k-1)/200
			hi := bx[0] + (bx[len(bx)-1]-bx[0])*float64(k)/200
			if !(st.Calibrate(hi) > st.Calibrate(lo)) {
				t.Fatalf("step %d: centred map not strictly increasing on [%v, %v]", s.Step, lo, hi)
			}
			sawFlat = sawFlat || sti.Calibrate(hi) == sti.Calibrate(lo)
		}
	}
	if st.FitVersion() == 0 || !sawFlat {
		t.Fatalf("run never fitted (%d) or the isotonic map was never flat (%v)", st.FitVersion(), sawFlat)
	}
	// The map kind is part of the config: its own hash, encoding version 2,
	// and a round trip.
	if cfg.Hash() == iso.Hash() {
		t.Fatal("map kind does not enter the config hash")
	}
	enc := st.Encode()
	if v := uint16(enc[8]) | uint16(enc[9])<<8; v != 2 {
		t.Fatalf("centred state encoded as version %d", v)
	}
	dec, err := DecodeState(enc)
	if err != nil || !slices.Equal(dec.Encode(), enc) {
		t.Fatalf("round trip: %v", err)
	}
	ref := ReferenceConfig()
	ref.Map = MapCentred
	if _, err := New(ref); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("reference mode with a centred map: %v", err)
	}
}
