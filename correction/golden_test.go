package correction

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

type goldenCase struct {
	Name string `json:"name"`
	Gen  *struct {
		Kind string `json:"kind"`
		N    int    `json:"n"`
		Seed uint64 `json:"seed"`
	} `json:"gen"`
	X           []float64 `json:"x"`
	Y           []float64 `json:"y"`
	W           []float64 `json:"w"`
	InputSHA256 string    `json:"input_sha256"`
	Queries     []float64 `json:"queries"`
	PredQueries []float64 `json:"pred_queries"`
	PredTrain   []float64 `json:"pred_train"`
	ThresholdsX []float64 `json:"thresholds_x"`
	ThresholdsY []float64 `json:"thresholds_y"`
}

// genCase mirrors generate() in testdata/gen_isotonic_golden.py, draw for
// draw; only correctly rounded operations are used so the bits agree.
func genCase(kind string, n int, seed uint64) (xs, ys, ws []float64, err error) {
	r := &splitMix64{s: seed}
	weighted := kind == "weighted" || kind == "intweights" || kind == "alternating" || kind == "heavy"
	const twoM53 = 1.0 / (1 << 53)
	for i := range n {
		var x, y float64
		w := 1.0
		switch kind {
		case "uniform":
			x = r.u()
			y = r.u()
		case "monotone":
			x = r.u()
			a := r.u()
			b := r.u()
			c := r.u()
			y = x + 0.3*(a+b+c-1.5)
		case "ties5":
			x = math.Floor(r.u()*5) / 5
			y = r.u()
		case "ties20":
			x = math.Floor(r.u()*20) / 20
			y = x + 0.5*(r.u()-0.5)
		case "weighted":
			x = r.u()
			y = x*x + 0.2*(r.u()-0.5)
			w = r.u() * 3
			if w < 0.3 {
				w = 0
			}
		case "intweights":
			x = math.Floor(r.u()*50) / 50
			y = r.u()
			w = math.Floor(r.u() * 4)
		case "decreasing":
			x = r.u()
			y = 1 - x + 0.01*(r.u()-0.5)
		case "identity":
			x = float64(i) / float64(n)
			y = x
		case "constx":
			x = 0.25
			y = r.u()
		case "ulpties":
			x = 0.5 + math.Floor(r.u()*20)*twoM53
			y = r.u()
		case "sawtooth":
			x = float64(i)
			y = float64(i%7)/7 + 0.001*r.u()
		case "staircase":
			x = float64(i)
			y = -float64(i/10) + 0.5*r.u()
		case "alternating":
			x = float64(i)
			y = float64(i % 2)
			w = float64(1 + i%3)
		case "scaled":
			x = r.u()*1e6 - 5e5
			y = (x/1e6 + 0.2*(r.u()-0.5)) * 1e-3
		case "heavy":
			x = r.u()
			y = r.u()
			if i == n/2 {
				w = 1e6
			}
		default:
			return nil, nil, nil, fmt.Errorf("unknown kind %q", kind)
		}
		xs, ys, ws = append(xs, x), append(ys, y), append(ws, w)
	}
	if !weighted {
		return xs, ys, nil, nil
	}
	allZero := true
	for _, v := range ws {
		allZero = allZero && v == 0
	}
	if allZero && n > 0 {
		ws[0] = 1
	}
	return xs, ys, ws, nil
}

func inputDigest(x, y, w []float64) string {
	h := sha256.New()
	var b [8]byte
	for _, arr := range [][]float64{x, y, w} {
		for _, v := range arr {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func loadGolden(t testing.TB) []goldenCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/isotonic_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 50 {
		t.Fatalf("golden file has only %d cases", len(doc.Cases))
	}
	return doc.Cases
}

func closeTo(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestGoldenSklearn compares FitIsotonic with scikit-learn to 1e-9
// (relative for values above 1) on every committed case.
func TestGoldenSklearn(t *testing.T) {
	const tol = 1e-9
	for _, c := range loadGolden(t) {
		t.Run(c.Name, func(t *testing.T) {
			x, y, w := c.X, c.Y, c.W
			if c.Gen != nil {
				var err error
				if x, y, w, err = genCase(c.Gen.Kind, c.Gen.N, c.Gen.Seed); err != nil {
					t.Fatal(err)
				}
			}
			if got := inputDigest(x, y, w); got != c.InputSHA256 {
				t.Fatalf("rebuilt inputs differ from the generator's: sha256 %s, want %s", got, c.InputSHA256)
			}
			f, err := FitIsotonic(x, y, w)
			if err != nil {
				t.Fatal(err)
			}
			for i, q := range c.Queries {
				if got := f.Predict(q); !closeTo(got, c.PredQueries[i], tol) {
					t.Errorf("Predict(query %v) = %v, sklearn %v", q, got, c.PredQueries[i])
				}
			}
			for i, xi := range x {
				if got := f.Predict(xi); !closeTo(got, c.PredTrain[i], tol) {
					t.Errorf("Predict(train[%d]=%v) = %v, sklearn %v", i, xi, got, c.PredTrain[i])
				}
			}
			bx, by := f.Breakpoints()
			if len(bx) != len(c.ThresholdsX) {
				t.Fatalf("%d breakpoints, sklearn keeps %d", len(bx), len(c.ThresholdsX))
			}
			for i := range bx {
				if bx[i] != c.ThresholdsX[i] || !closeTo(by[i], c.ThresholdsY[i], tol) {
					t.Errorf("breakpoint %d = (%v, %v), sklearn (%v, %v)", i, bx[i], by[i], c.ThresholdsX[i], c.ThresholdsY[i])
				}
			}
		})
	}
}
