package task

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// fourierDim is the number of random Fourier features at full fidelity.
const fourierDim = 64

// featureMap is a fitted feature transform; its statistics come only from
// the rows the model is trained on, as a careful experimenter would do.
type featureMap struct {
	kind     Transform
	mean, sd []float64
	w        *mat.Dense // Fourier projection, d×D
	b        []float64  // Fourier phases
}

func fitFeatures(t Transform, x *mat.Dense, dim int, src rand.Source) *featureMap {
	f := &featureMap{kind: t}
	if t == Raw {
		return f
	}
	_, d := x.Dims()
	f.mean = make([]float64, d)
	f.sd = make([]float64, d)
	col := make([]float64, x.RawMatrix().Rows)
	for j := range d {
		mat.Col(col, j, x)
		m, s := stat.PopMeanStdDev(col, nil)
		if !(s > 1e-12) {
			s = 1
		}
		f.mean[j], f.sd[j] = m, s
	}
	if t == Fourier {
		norm := distuv.Normal{Mu: 0, Sigma: 1 / math.Sqrt(float64(d)), Src: src}
		unif := distuv.Uniform{Min: 0, Max: 2 * math.Pi, Src: src}
		f.w = mat.NewDense(d, dim, nil)
		for i := range d {
			for j := range dim {
				f.w.Set(i, j, norm.Rand())
			}
		}
		f.b = make([]float64, dim)
		for j := range f.b {
			f.b[j] = unif.Rand()
		}
	}
	return f
}

// apply transforms the rows of x into a new matrix.
func (f *featureMap) apply(x *mat.Dense) *mat.Dense {
	r, d := x.Dims()
	if f.kind == Raw {
		return mat.DenseCopyOf(x)
	}
	z := mat.NewDense(r, d, nil)
	z.Apply(func(i, j int, v float64) float64 { return (v - f.mean[j]) / f.sd[j] }, x)
	switch f.kind {
	case Poly2:
		p := d + d*(d+1)/2
		out := mat.NewDense(r, p, nil)
		for i := range r {
			row := z.RawRowView(i)
			o := out.RawRowView(i)
			copy(o, row)
			k := d
			for a := range d {
				for b := a; b < d; b++ {
					o[k] = row[a] * row[b]
					k++
				}
			}
		}
		return out
	case Fourier:
		_, dim := f.w.Dims()
		out := mat.NewDense(r, dim, nil)
		out.Mul(z, f.w)
		s := math.Sqrt(2 / float64(dim))
		out.Apply(func(_, j int, v float64) float64 { return s * math.Cos(v+f.b[j]) }, out)
		return out
	}
	return z
}
