package correction

import "math"

// The authors' code computes every statistic with numpy. Reference mode
// repeats numpy's floating-point operations in the same order, so its rows
// agree with the authors' loop to the last bit in most cases, not merely to
// a tolerance: sums use numpy's pairwise summation, and interpolation is
// np.interp's formula without wmrl's monotonicity clamp.

// npBlock is numpy's PW_BLOCKSIZE: below it a sum uses eight interleaved
// accumulators, above it the array is split in two.
const npBlock = 128

// npSum is np.sum of a contiguous float64 array (numpy's pairwise_sum
// started from the additive identity).
func npSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		s := 0.0
		for _, v := range a {
			s += v
		}
		return s
	case n <= npBlock:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range r {
				r[j] += a[i+j]
			}
		}
		s := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			s += a[i]
		}
		return s
	}
	n2 := n / 2
	n2 -= n2 % 8
	return npSum(a[:n2]) + npSum(a[n2:])
}

// npMean is a.mean().
func npMean(a []float64) float64 { return npSum(a) / float64(len(a)) }

// npVar is a.var(ddof) with scratch for the squared deviations: the mean,
// then the sum of (a−mean)² over n−ddof.
func npVar(a, scratch []float64, ddof int) float64 {
	m := npMean(a)
	scratch = scratch[:0]
	for _, v := range a {
		d := v - m
		scratch = append(scratch, float64(d*d))
	}
	return npSum(scratch) / float64(max(len(a)-ddof, 0))
}

// npInterp is np.interp(x, xp, fp) for increasing xp with at least one
// point: flat outside [xp[0], xp[n−1]], exact at a breakpoint, else
// slope·(x − xp[j]) + fp[j] with slope = Δfp/Δxp of the segment.
func npInterp(xp, fp []float64, x float64) float64 {
	n := len(xp)
	switch {
	case x != x:
		return math.NaN()
	case x > xp[n-1]:
		return fp[n-1]
	case x < xp[0]:
		return fp[0]
	}
	// Largest j with xp[j] <= x.
	lo, hi := 0, n
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if xp[m] <= x {
			lo = m
		} else {
			hi = m
		}
	}
	j := lo
	if j == n-1 || xp[j] == x {
		return fp[j]
	}
	slope := (fp[j+1] - fp[j]) / (xp[j+1] - xp[j])
	return float64(slope*float64(x-xp[j])) + fp[j]
}
