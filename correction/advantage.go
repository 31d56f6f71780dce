package correction

import "math"

// Advantages computes group-relative advantages for one group. A reward is
// usable when OK is true and its score is finite; unusable rewards are
// excluded from the group statistics and get advantage 0 and mask false. A
// group with fewer than 2 usable rewards is masked whole. GRPO divides by
// (std + eps) with std over n − ddof; if that denominator is 0 (eps = 0 and
// all rewards equal) the advantages are 0. Unknown kinds are treated as
// GRPO; ddof other than 1 is treated as 0.
func Advantages(rewards []Reward, kind AdvantageKind, eps float64, ddof int) (adv []float64, mask []bool) {
	vals := make([]float64, len(rewards))
	mask = make([]bool, len(rewards))
	for i, r := range rewards {
		if r.OK && finite(r.Score) {
			vals[i], mask[i] = r.Score, true
		}
	}
	adv = make([]float64, len(rewards))
	groupAdvantages(vals, mask, adv, kind, eps, ddof)
	return adv, mask
}

// groupAdvantages is the allocation-free core: vals[i] is used iff mask[i];
// it writes adv and clears mask for the whole group if fewer than 2 are
// usable. Sums run in index order, which the Corrector makes canonical.
func groupAdvantages(vals []float64, mask []bool, adv []float64, kind AdvantageKind, eps float64, ddof int) {
	n := 0
	sum := 0.0
	for i, v := range vals {
		adv[i] = 0
		if mask[i] {
			n++
			sum += v
		}
	}
	if n < 2 {
		for i := range mask {
			mask[i] = false
		}
		return
	}
	mean := sum / float64(n)
	if kind == DrGRPO {
		for i, v := range vals {
			if mask[i] {
				adv[i] = v - mean
			}
		}
		return
	}
	ss := 0.0
	for i, v := range vals {
		if mask[i] {
			d := v - mean
			ss += float64(d * d)
		}
	}
	dof := n
	if ddof == 1 {
		dof = n - 1
	}
	denom := math.Sqrt(ss/float64(dof)) + eps
	if denom == 0 {
		return
	}
	for i, v := range vals {
		if mask[i] {
			adv[i] = (v - mean) / denom
		}
	}
}

// groupAdvantagesNumpy is groupAdvantages with the authors' arithmetic
// (group_advantages in wmrl/advantage.py): the usable rewards are gathered
// in index order and mean and std are numpy's (pairwise sums). scratch is
// reused between groups.
func groupAdvantagesNumpy(vals []float64, mask []bool, adv []float64, kind AdvantageKind, eps float64, ddof int, scratch []float64) []float64 {
	arr := scratch[:0]
	for i, v := range vals {
		adv[i] = 0
		if mask[i] {
			arr = append(arr, v)
		}
	}
	if len(arr) < 2 {
		for i := range mask {
			mask[i] = false
		}
		return arr
	}
	mu := npMean(arr)
	if kind == DrGRPO {
		for i, v := range vals {
			if mask[i] {
				adv[i] = v - mu
			}
		}
		return arr
	}
	// The squared deviations go into scratch right after arr.
	denom := math.Sqrt(npVar(arr, arr[len(arr):], ddof)) + eps
	if denom == 0 {
		return arr
	}
	for i, v := range vals {
		if mask[i] {
			adv[i] = (v - mu) / denom
		}
	}
	return arr
}
