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
