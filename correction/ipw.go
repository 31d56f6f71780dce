package correction

// Inverse-propensity weights in the advantages' fusion (docs/anchors.md, "Inverse-propensity
// weights", item 3): an anchor row's IVD weight is multiplied by its group's weight normalised to
// mean 1 over the step's masked anchor rows. Rows of steps whose anchor groups all have unit
// weight are left untouched, so today's outputs are bit-for-bit unchanged.

// ipwNorm is the mean pair weight over the masked anchor rows of one step's rows (grouped in
// canonical order, gws[k] the weight of the k-th group), or 0 when every anchor group has unit
// weight or no anchor row is masked in.
func ipwNorm(rows []Row, gws []float64) float64 {
	var sum, n float64
	weighted := false
	eachGroup(rows, func(k, i, j int) {
		if rows[i].Source != SourceAnchor {
			return
		}
		if gws[k] != 1 {
			weighted = true
		}
		for _, r := range rows[i:j] {
			if r.Mask {
				sum += gws[k]
				n++
			}
		}
	})
	if !weighted || n == 0 {
		return 0
	}
	return sum / n
}

// reweightAnchorRows multiplies each masked anchor row's weight by its group's weight / norm.
func reweightAnchorRows(rows []Row, gws []float64, norm float64) {
	eachGroup(rows, func(k, i, j int) {
		if rows[i].Source != SourceAnchor {
			return
		}
		for x := i; x < j; x++ {
			if rows[x].Mask {
				rows[x].Weight *= gws[k] / norm
			}
		}
	})
}

// eachGroup calls fn(k, i, j) for the k-th run rows[i:j] of rows sharing a group id.
func eachGroup(rows []Row, fn func(k, i, j int)) {
	for i, k := 0, 0; i < len(rows); k++ {
		j := i
		for j < len(rows) && rows[j].GroupID == rows[i].GroupID {
			j++
		}
		fn(k, i, j)
		i = j
	}
}
