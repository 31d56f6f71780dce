package task

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Kind is the type of learning problem.
type Kind int

const (
	// Regression problems are scored by validation R², clipped to [0,1].
	Regression Kind = iota
	// Classification problems are binary and scored by balanced accuracy
	// rescaled so that chance is 0 and perfect is 1.
	Classification
)

// String returns "regression" or "classification".
func (k Kind) String() string {
	switch k {
	case Regression:
		return "regression"
	case Classification:
		return "classification"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Problem sizes. They are fixed so that a problem is fully named by (seed,
// kind), which lets every pipeline stage rebuild the same problem.
const (
	// NumFeatures is the number of observed input features.
	NumFeatures = 10
	// NumTrain is the number of training rows.
	NumTrain = 600
	// NumValidation is the number of held-out validation rows.
	NumValidation = 400
)

// Problem is one seeded synthetic ML problem: a hidden nonlinear target over
// badly scaled features (some irrelevant), split into training rows and
// held-out validation rows. Only Execute reads the validation rows.
type Problem struct {
	seed  int64
	kind  Kind
	train TrainView
	valX  *mat.Dense
	valY  []float64
}

// TrainView is the part of a problem a world model may see: the training rows
// and the problem's identity. It structurally lacks the validation rows (its
// storage is allocated separately, so not even slice capacity reaches them).
type TrainView struct {
	seed int64
	kind Kind
	x    *mat.Dense
	y    []float64
}

// NewProblem generates the problem for (seed, kind) deterministically.
//
// The hidden target mixes linear effects, one pairwise interaction, one
// quadratic, one periodic and one step term over standardized latents, plus
// noise of
// 0.4× the signal's standard deviation; the observed features are the latents
// with random scales spanning three decades and random offsets. So scaling,
// nonlinear features, capacity and regularization all matter, and the best
// achievable score is well below 1.
func NewProblem(seed int64, kind Kind) *Problem {
	src := rand.NewPCG(uint64(seed), 0x7761736b5f70726f^uint64(kind))
	rng := rand.New(src)
	norm := distuv.Normal{Mu: 0, Sigma: 1, Src: src}
	unif := distuv.Uniform{Min: 0, Max: 1, Src: src}

	n := NumTrain + NumValidation
	d := NumFeatures
	z := mat.NewDense(n, d, nil)
	for i := range n {
		for j := range d {
			z.Set(i, j, norm.Rand())
		}
	}
	t := drawTarget(rng, unif, d)
	f := make([]float64, n)
	for i := range n {
		f[i] = t.at(z, i)
	}
	y := labels(kind, f, distuv.Normal{Mu: 0, Sigma: 0.4 * stat.PopStdDev(f, nil), Src: src})

	scale := make([]float64, d)
	offset := make([]float64, d)
	for j := range d {
		scale[j] = math.Pow(10, -1.5+3*unif.Rand())
		offset[j] = scale[j] * 2 * norm.Rand()
	}
	observe := func(rows int, from int) *mat.Dense {
		x := mat.NewDense(rows, d, nil)
		for i := range rows {
			for j := range d {
				x.Set(i, j, offset[j]+scale[j]*z.At(from+i, j))
			}
		}
		return x
	}
	return &Problem{
		seed: seed,
		kind: kind,
		train: TrainView{
			seed: seed,
			kind: kind,
			x:    observe(NumTrain, 0),
			y:    exactCopy(y[:NumTrain]),
		},
		valX: observe(NumValidation, NumTrain),
		valY: exactCopy(y[NumTrain:]),
	}
}

// target is the hidden noiseless target: linear effects of four latents, one pairwise
// interaction, one quadratic, one periodic and one step term; perm picks the latents.
type target struct {
	perm                     []int
	beta                     [4]float64
	gamma, delta, omega, eta float64
	cut                      float64
}

// drawTarget draws the target's latents and coefficients, each with a random sign and a
// magnitude in a fixed range.
func drawTarget(rng *rand.Rand, unif distuv.Uniform, d int) target {
	t := target{perm: rng.Perm(d)}
	sign := func() float64 {
		if unif.Rand() < 0.5 {
			return -1
		}
		return 1
	}
	for k := range t.beta {
		t.beta[k] = sign() * (0.3 + 0.4*unif.Rand())
	}
	t.gamma = sign() * (0.9 + 0.4*unif.Rand())
	t.delta = sign() * (0.5 + 0.3*unif.Rand())
	t.omega = 0.6 + 0.3*unif.Rand()
	t.eta = sign() * (1.2 + 0.4*unif.Rand())
	t.cut = unif.Rand() - 0.5
	return t
}

// at is the target's value at latent row i of z.
func (t target) at(z *mat.Dense, i int) float64 {
	perm := t.perm
	v := 0.0
	for k := range t.beta {
		v += t.beta[k] * z.At(i, perm[k])
	}
	v += t.gamma * z.At(i, perm[4]) * z.At(i, perm[5])
	zq := z.At(i, perm[6])
	v += t.delta * (zq*zq - 1) / math.Sqrt2
	v += t.omega * math.Sin(2*z.At(i, perm[1])+z.At(i, perm[7]))
	if z.At(i, perm[2]) > t.cut {
		v += t.eta
	}
	return v
}

// labels adds noise to the target values f: regression labels are f plus noise, classification
// labels are 1 where f plus noise exceeds f's median.
func labels(kind Kind, f []float64, noise distuv.Normal) []float64 {
	n := len(f)
	y := make([]float64, n)
	switch kind {
	case Classification:
		sorted := append([]float64(nil), f...)
		sort.Float64s(sorted)
		med := stat.Quantile(0.5, stat.Empirical, sorted, nil)
		for i := range n {
			if f[i]+noise.Rand() > med {
				y[i] = 1
			}
		}
	default:
		for i := range n {
			y[i] = f[i] + noise.Rand()
		}
	}
	return y
}

// exactCopy copies v into a slice whose capacity is exactly len(v), so the
// training view's storage provably ends at its last row.
func exactCopy(v []float64) []float64 {
	out := make([]float64, len(v))
	copy(out, v)
	return out
}

// Seed returns the problem's seed.
func (p *Problem) Seed() int64 { return p.seed }

// Kind returns the problem's kind.
func (p *Problem) Kind() Kind { return p.kind }

// String names the problem, e.g. "regression/42".
func (p *Problem) String() string { return fmt.Sprintf("%s/%d", p.kind, p.seed) }

// Train returns the training view, the only part of the problem a world
// model receives. The view is read-only and shares nothing with the
// validation rows.
func (p *Problem) Train() TrainView { return p.train }

// Seed returns the seed of the problem the view belongs to.
func (t TrainView) Seed() int64 { return t.seed }

// Kind returns the problem kind.
func (t TrainView) Kind() Kind { return t.kind }

// Rows returns the number of training rows (0 for the zero TrainView).
func (t TrainView) Rows() int {
	if t.x == nil {
		return 0
	}
	r, _ := t.x.Dims()
	return r
}

// Cols returns the number of features.
func (t TrainView) Cols() int {
	if t.x == nil {
		return 0
	}
	_, c := t.x.Dims()
	return c
}

// Row copies training row i into dst (allocated if nil) and returns it.
func (t TrainView) Row(i int, dst []float64) []float64 {
	return mat.Row(dst, i, t.x)
}

// Label returns the target of training row i (0/1 for classification).
func (t TrainView) Label(i int) float64 { return t.y[i] }
