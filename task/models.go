package task

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"
)

// fidelity scales the cost of a run. Execute uses full fidelity; the world
// model runs the same code at reduced fidelity.
type fidelity struct {
	iterFrac float64 // fraction of the solution's iterations/rounds
	capFrac  float64 // fraction of hidden width and Fourier dimension
}

var fullFidelity = fidelity{iterFrac: 1, capFrac: 1}

func (f fidelity) iterations(s Solution) int {
	return max(1, int(math.Round(float64(s.Iterations())*f.iterFrac)))
}

func (f fidelity) width(s Solution) int {
	return max(4, int(math.Round(float64(s.Width())*f.capFrac)))
}

func (f fidelity) fourierDim() int {
	return max(8, int(math.Round(fourierDim*f.capFrac)))
}

// predictor maps transformed feature rows to raw model outputs: a real value
// for regression, a decision value (>0 means class 1) for classification.
type predictor interface {
	predict(z *mat.Dense) []float64
}

// run fits solution s on (x, y) at fidelity fid and returns its raw outputs
// on each of evals. All randomness (Fourier projection, hidden weights) comes
// from seed, so a run is a pure function of its inputs.
func run(ctx context.Context, kind Kind, x *mat.Dense, y []float64, s Solution, fid fidelity, seed uint64, evals ...*mat.Dense) ([][]float64, error) {
	src := rand.NewPCG(seed, 0x6578656375746521)
	fm := fitFeatures(s.Features, x, fid.fourierDim(), src)
	z := fm.apply(x)
	var (
		m   predictor
		err error
	)
	switch s.Model {
	case Ridge:
		m, err = fitRidge(z, targets(kind, y), s.Regularization())
	case GradientDescent:
		m, err = fitGD(ctx, kind, z, y, s.Regularization(), s.LearningRate(), fid.iterations(s))
	case KNN:
		m = &knn{kind: kind, train: z, y: y, k: min(s.Neighbours(), len(y))}
	case RandomNet:
		m, err = fitRandomNet(z, targets(kind, y), s.Regularization(), fid.width(s), src)
	case Boosting:
		m, err = fitBoost(ctx, kind, z, y, s.Regularization(), s.LearningRate(), fid.iterations(s))
	default:
		return nil, fmt.Errorf("%w: model %d", ErrInvalidSolution, s.Model)
	}
	out := make([][]float64, len(evals))
	if errors.Is(err, errDiverged) {
		for i, e := range evals {
			r, _ := e.Dims()
			out[i] = slices.Repeat([]float64{math.NaN()}, r)
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for i, e := range evals {
		out[i] = m.predict(fm.apply(e))
	}
	return out, nil
}

// targets maps classification labels {0,1} to {-1,+1} for least-squares
// classifiers; regression targets pass through.
func targets(kind Kind, y []float64) []float64 {
	if kind != Classification {
		return y
	}
	t := make([]float64, len(y))
	for i, v := range y {
		t[i] = 2*v - 1
	}
	return t
}

// linear is w·(z − mu) + b.
type linear struct {
	mu, w []float64
	b     float64
}

func (l *linear) predict(z *mat.Dense) []float64 {
	r, _ := z.Dims()
	out := make([]float64, r)
	tmp := make([]float64, len(l.w))
	for i := range r {
		floats.SubTo(tmp, z.RawRowView(i), l.mu)
		out[i] = floats.Dot(tmp, l.w) + l.b
	}
	return out
}

// fitRidge solves (ZcᵀZc/n + λI) w = Zcᵀ(y−ȳ)/n on centred data by
// Cholesky. A tiny jitter keeps the system solvable when λ = 0 and there
// are more features than rows; the result then nearly interpolates, which is
// exactly how an unregularized over-parameterized fit behaves.
func fitRidge(z *mat.Dense, y []float64, lambda float64) (*linear, error) {
	n, p := z.Dims()
	mu := make([]float64, p)
	for i := range n {
		floats.Add(mu, z.RawRowView(i))
	}
	floats.Scale(1/float64(n), mu)
	ybar := floats.Sum(y) / float64(n)
	zc := mat.NewDense(n, p, nil)
	yc := make([]float64, n)
	for i := range n {
		floats.SubTo(zc.RawRowView(i), z.RawRowView(i), mu)
		yc[i] = y[i] - ybar
	}
	var g mat.SymDense
	g.SymOuterK(1/float64(n), zc.T())
	trace := g.Trace()
	var rhs mat.VecDense
	rhs.MulVec(zc.T(), mat.NewVecDense(n, yc))
	rhs.ScaleVec(1/float64(n), &rhs)
	jitter := 1e-10*trace/float64(p) + 1e-12
	for range 3 {
		a := mat.NewSymDense(p, nil)
		a.CopySym(&g)
		for j := range p {
			a.SetSym(j, j, a.At(j, j)+lambda+jitter)
		}
		var ch mat.Cholesky
		if ch.Factorize(a) {
			var w mat.VecDense
			if err := ch.SolveVecTo(&w, &rhs); err == nil || isConditionOnly(err) {
				ws := mat.Col(nil, 0, &w)
				if !allFinite(ws) {
					return nil, errDiverged
				}
				return &linear{mu: mu, w: ws, b: ybar}, nil
			}
		}
		jitter *= 1e4
	}
	return nil, errDiverged
}

// isConditionOnly reports a gonum warning about ill-conditioning, whose
// solution is still returned.
func isConditionOnly(err error) bool {
	var c mat.Condition
	return errors.As(err, &c)
}

func allFinite(v []float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// fitGD trains a linear model (squared loss, or logistic loss for
// classification) by full-batch gradient descent from zero with L2 penalty.
func fitGD(ctx context.Context, kind Kind, z *mat.Dense, y []float64, lambda, lr float64, iters int) (*linear, error) {
	n, p := z.Dims()
	w := mat.NewVecDense(p, nil)
	b := 0.0
	var pred, grad mat.VecDense
	r := mat.NewVecDense(n, nil)
	for it := range iters {
		if it%16 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		pred.MulVec(z, w)
		rr := r.RawVector().Data
		for i := range n {
			v := pred.AtVec(i) + b
			if kind == Classification {
				v = sigmoid(v)
			}
			rr[i] = v - y[i]
		}
		grad.MulVec(z.T(), r)
		grad.ScaleVec(1/float64(n), &grad)
		grad.AddScaledVec(&grad, lambda, w)
		w.AddScaledVec(w, -lr, &grad)
		b -= lr * floats.Sum(rr) / float64(n)
		if math.IsNaN(b) || math.IsInf(b, 0) || !allFinite(w.RawVector().Data) {
			return nil, errDiverged
		}
	}
	return &linear{mu: make([]float64, p), w: mat.Col(nil, 0, w), b: b}, nil
}

func sigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

// knn predicts the mean label of the k nearest training rows (Euclidean,
// ties broken by row index); for classification the decision value is the
// vote share minus one half.
type knn struct {
	kind  Kind
	train *mat.Dense
	y     []float64
	k     int
}

func (m *knn) predict(z *mat.Dense) []float64 {
	r, _ := z.Dims()
	n, _ := m.train.Dims()
	var g mat.Dense
	g.Mul(z, m.train.T())
	tn := make([]float64, n)
	for j := range n {
		row := m.train.RawRowView(j)
		tn[j] = floats.Dot(row, row)
	}
	out := make([]float64, r)
	type cand struct {
		d float64
		i int
	}
	best := make([]cand, 0, m.k)
	for i := range r {
		best = best[:0]
		gi := g.RawRowView(i)
		for j := range n {
			d := tn[j] - 2*gi[j]
			if len(best) == m.k && !(d < best[m.k-1].d) {
				continue
			}
			if len(best) < m.k {
				best = append(best, cand{})
			}
			pos := len(best) - 1
			for pos > 0 && d < best[pos-1].d {
				best[pos] = best[pos-1]
				pos--
			}
			best[pos] = cand{d, j}
		}
		s := 0.0
		for _, c := range best {
			s += m.y[c.i]
		}
		out[i] = s / float64(len(best))
		if m.kind == Classification {
			out[i] -= 0.5
		}
	}
	return out
}

// randomNet is a ReLU layer with fixed random weights and a ridge read-out.
type randomNet struct {
	w   *mat.Dense
	b   []float64
	out *linear
}

func fitRandomNet(z *mat.Dense, y []float64, lambda float64, width int, src rand.Source) (*randomNet, error) {
	_, p := z.Dims()
	norm := distuv.Normal{Mu: 0, Sigma: math.Sqrt(2 / float64(p)), Src: src}
	net := &randomNet{w: mat.NewDense(p, width, nil), b: make([]float64, width)}
	for i := range p {
		for j := range width {
			net.w.Set(i, j, norm.Rand())
		}
	}
	for j := range net.b {
		net.b[j] = 0.5 * norm.Rand()
	}
	h := net.hidden(z)
	out, err := fitRidge(h, y, lambda)
	if err != nil {
		return nil, err
	}
	net.out = out
	return net, nil
}

func (net *randomNet) hidden(z *mat.Dense) *mat.Dense {
	var h mat.Dense
	h.Mul(z, net.w)
	h.Apply(func(_, j int, v float64) float64 { return max(0, v+net.b[j]) }, &h)
	return &h
}

func (net *randomNet) predict(z *mat.Dense) []float64 { return net.out.predict(net.hidden(z)) }

// stump is one boosting round: value left if x[feature] <= threshold.
type stump struct {
	feature     int
	threshold   float64
	left, right float64
}

type boosted struct {
	base   float64
	stumps []stump
}

func (m *boosted) predict(z *mat.Dense) []float64 {
	r, _ := z.Dims()
	out := make([]float64, r)
	for i := range r {
		row := z.RawRowView(i)
		v := m.base
		for _, s := range m.stumps {
			if row[s.feature] <= s.threshold {
				v += s.left
			} else {
				v += s.right
			}
		}
		out[i] = v
	}
	return out
}

// boostBins caps the candidate thresholds per feature: like histogram-based
// boosting libraries, splits are searched between quantile bins.
const boostBins = 32

// fitBoost is histogram gradient boosting of stumps with Newton leaves
// G/(H + reg·n) (squared loss, or logistic loss for classification) and
// shrinkage lr.
func fitBoost(ctx context.Context, kind Kind, z *mat.Dense, y []float64, reg, lr float64, rounds int) (*boosted, error) {
	n, _ := z.Dims()
	lambda := reg*float64(n) + 1e-9
	thr, bin := quantileBins(z)
	m := &boosted{}
	mean := floats.Sum(y) / float64(n)
	if kind == Classification {
		mean = math.Min(math.Max(mean, 1e-3), 1-1e-3)
		m.base = math.Log(mean / (1 - mean))
	} else {
		m.base = mean
	}
	f := slices.Repeat([]float64{m.base}, n)
	g := make([]float64, n)
	h := make([]float64, n)
	for round := range rounds {
		if round%16 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		for i := range n {
			if kind == Classification {
				q := sigmoid(f[i])
				g[i] = y[i] - q
				h[i] = math.Max(q*(1-q), 1e-6)
			} else {
				g[i] = y[i] - f[i]
				h[i] = 1
			}
		}
		best, bestBin, ok := bestStump(thr, bin, g, h, lambda, lr)
		if !ok {
			break
		}
		if math.IsNaN(best.left) || math.IsNaN(best.right) || math.IsInf(best.left, 0) || math.IsInf(best.right, 0) {
			return nil, errDiverged
		}
		m.stumps = append(m.stumps, best)
		for i, b := range bin[best.feature] {
			if int(b) <= bestBin {
				f[i] += best.left
			} else {
				f[i] += best.right
			}
		}
	}
	return m, nil
}

// quantileBins returns, per feature of z, up to boostBins−1 increasing thresholds midway
// between neighbouring quantiles, and every row's bin (the number of thresholds below its
// value).
func quantileBins(z *mat.Dense) (thr [][]float64, bin [][]uint8) {
	n, p := z.Dims()
	thr = make([][]float64, p)
	bin = make([][]uint8, p)
	sorted := make([]float64, n)
	for j := range p {
		mat.Col(sorted, j, z)
		col := append([]float64(nil), sorted...)
		sort.Float64s(sorted)
		for b := 1; b < boostBins; b++ {
			k := b * n / boostBins
			if k <= 0 || k >= n || !(sorted[k] > sorted[k-1]) {
				continue
			}
			t := sorted[k-1] + (sorted[k]-sorted[k-1])/2
			if len(thr[j]) == 0 || t > thr[j][len(thr[j])-1] {
				thr[j] = append(thr[j], t)
			}
		}
		bin[j] = make([]uint8, n)
		for i, v := range col {
			bin[j][i] = uint8(sort.SearchFloat64s(thr[j], v))
		}
	}
	return thr, bin
}

// bestStump searches every feature's bin thresholds for the split of largest Newton gain
// given gradients g and hessians h, and returns it with its leaves shrunk by lr and the last
// bin of its left side; ok is false when no feature has a threshold.
func bestStump(thr [][]float64, bin [][]uint8, g, h []float64, lambda, lr float64) (best stump, bestBin int, ok bool) {
	gt, ht := floats.Sum(g), floats.Sum(h)
	bestGain := math.Inf(-1)
	for j := range thr {
		nb := len(thr[j])
		if nb == 0 {
			continue
		}
		var hg, hh [boostBins]float64
		for i, b := range bin[j] {
			hg[b] += g[i]
			hh[b] += h[i]
		}
		gl, hl := 0.0, 0.0
		for b := range nb {
			gl += hg[b]
			hl += hh[b]
			gr, hr := gt-gl, ht-hl
			gain := gl*gl/(hl+lambda) + gr*gr/(hr+lambda)
			if gain > bestGain {
				bestGain = gain
				best = stump{feature: j, threshold: thr[j][b], left: lr * gl / (hl + lambda), right: lr * gr / (hr + lambda)}
				bestBin = b
			}
		}
	}
	return best, bestBin, !math.IsInf(bestGain, -1)
}
