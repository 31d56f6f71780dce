package correction

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// FuzzFitIsotonic decodes the input as (x, y, w) float64 triples and checks
// that FitIsotonic either rejects it with an error or returns a
// non-decreasing fit within the range of the positively weighted y values.
func FuzzFitIsotonic(f *testing.F) {
	enc := func(v ...float64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return b
	}
	f.Add(enc(0, 1, 1, 1, 0, 1))
	f.Add(enc(0.5, 0.2, 1, 0.5, 0.8, 0))
	f.Add(enc(math.NaN(), 1, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b) / 24
		x, y, w := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range n {
			x[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[24*i:]))
			y[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[24*i+8:]))
			w[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[24*i+16:]))
		}
		fit, err := FitIsotonic(x, y, w)
		if err != nil {
			if fit != nil {
				t.Fatal("fit with error")
			}
			return
		}
		bx, by := fit.Breakpoints()
		if len(bx) == 0 || len(bx) != len(by) {
			t.Fatalf("breakpoints %d/%d", len(bx), len(by))
		}
		ylo, yhi := math.Inf(1), math.Inf(-1)
		for i := range y {
			if w[i] > 0 {
				ylo, yhi = min(ylo, y[i]), max(yhi, y[i])
			}
		}
		for i := range bx {
			if i > 0 && (bx[i] <= bx[i-1] || by[i] < by[i-1]) {
				t.Fatalf("breakpoints not increasing at %d: %v %v", i, bx, by)
			}
			// Block means lie in [min y, max y] up to rounding of the sums.
			tol := 1e-9 * max(1, math.Abs(ylo), math.Abs(yhi))
			if by[i] < ylo-tol || by[i] > yhi+tol {
				t.Fatalf("fitted %v outside [%v, %v]", by[i], ylo, yhi)
			}
		}
		xs := slices.Clone(x)
		slices.Sort(xs)
		prev := math.Inf(-1)
		for _, q := range xs {
			v := fit.Predict(q)
			if v < prev {
				t.Fatalf("Predict not monotone at %v", q)
			}
			prev = v
		}
	})
}

// FuzzDecodeState checks that DecodeState never panics, and that whatever
// it accepts re-encodes to the same bytes and can be queried and advanced.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(stateMagic))
	f.Add(mustNew(f, ReferenceConfig()).NewState("r", "s").Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil {
			if st != nil {
				t.Fatal("state with error")
			}
			return
		}
		if !bytes.Equal(st.Encode(), b) {
			t.Fatal("Encode(DecodeState(b)) != b")
		}
		_ = st.Calibrate(0.5)
		_ = st.AnchorWeight()
		c, err := New(st.Config())
		if err != nil {
			t.Fatalf("decoded config invalid: %v", err)
		}
		step := Step{Run: st.Run(), Stream: st.Stream(), Step: st.SealedStep() + 1, Groups: []Group{
			{ID: "a", Anchor: true, Rollouts: []Rollout{
				{ID: "1", Predicted: Reward{0.3, true}, Executed: Reward{0.2, true}},
				{ID: "2", Predicted: Reward{0.6, true}, Executed: Reward{0.9, true}},
			}},
		}}
		if st.SealedStep() == math.MaxInt64 {
			return
		}
		if _, _, err := c.Correct(st, step); err != nil {
			t.Fatalf("advancing a decoded state: %v", err)
		}
	})
}

// FuzzAssembleState holds the changelog's head-and-chunks form to its contract: arbitrary head and
// window bytes never panic, and an assembled state holds exactly the window it was given and
// round-trips through its full encoding.
func FuzzAssembleState(f *testing.F) {
	cfg := DefaultConfig()
	cfg.Window, cfg.MinPairs = 8, 2
	c := mustNew(f, cfg)
	st := c.NewState("r", "s")
	for v := int64(0); v < 3; v++ {
		step := Step{Run: "r", Stream: "s", Step: v, Groups: []Group{{ID: "a", Anchor: true, Rollouts: []Rollout{
			{ID: "1", Predicted: Reward{0.3, true}, Executed: Reward{0.2, true}},
			{ID: "2", Predicted: Reward{0.6 + 0.1*float64(v), true}, Executed: Reward{0.9, true}},
		}}}}
		var err error
		if _, st, err = c.Correct(st, step); err != nil {
			f.Fatal(err)
		}
	}
	first, n := st.WindowSpan()
	f.Add(st.EncodeHead(), st.AppendWindow(nil, first, first+uint64(n)))
	f.Add(c.NewState("r", "s").EncodeHead(), []byte(nil))
	f.Fuzz(func(t *testing.T, head, window []byte) {
		st, err := AssembleState(head, window)
		if err != nil {
			if st != nil {
				t.Fatal("state with error")
			}
			return
		}
		first, n := st.WindowSpan()
		if !bytes.Equal(st.AppendWindow(nil, first, first+uint64(n)), window) {
			t.Fatal("the assembled window is not the one given")
		}
		back, err := DecodeState(st.Encode())
		if err != nil || !bytes.Equal(back.Encode(), st.Encode()) {
			t.Fatalf("assembled state does not round-trip: %v", err)
		}
	})
}
