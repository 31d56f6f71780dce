package correction

// splitMix64 is the generator of testdata/splitmix64.py, which the Python golden generator
// (testdata/gen_isotonic_golden.py) and the numpy benchmark (bench/reference_bench.py) import:
// both sides rebuild identical inputs from a seed.
type splitMix64 struct{ s uint64 }

func (r *splitMix64) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// u is a uniform double in [0,1) with 53 random bits.
func (r *splitMix64) u() float64 { return float64(r.next()>>11) * (1.0 / (1 << 53)) }
