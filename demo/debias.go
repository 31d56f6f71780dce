package demo

import (
	"cmp"
	"slices"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// debiasShift is the mean |A(f(r̂)) − A(r̂)| over the unmasked world-model rows of one step as
// the trainer received them: correction.DebiasEffect per stream (the function the correction
// consumer publishes in its snapshots), weighted by each stream's rows. Rows carry the raw
// prediction beside the advantage, so nothing else is needed.
func debiasShift(c *correction.Corrector, rows []topics.AdvantageRow) float64 {
	cr := make([]correction.Row, len(rows))
	for i := range rows {
		r := &rows[i]
		src := correction.SourceWorldModel
		if r.Source == topics.SourceAnchor {
			src = correction.SourceAnchor
		}
		cr[i] = correction.Row{Run: r.RunID, Stream: r.Stream, Step: r.Step, GroupID: r.GroupID, RolloutID: r.RolloutID,
			Source: src, Predicted: r.Predicted, PredictedOK: r.PredictedOK, Mask: r.Mask, Advantage: r.Advantage}
	}
	// DebiasEffect reads one stream's rows with each group's rows adjacent.
	slices.SortFunc(cr, func(a, b correction.Row) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.GroupID, b.GroupID), cmp.Compare(a.RolloutID, b.RolloutID))
	})
	var sum float64
	n := 0
	for i := 0; i < len(cr); {
		j := i
		for j < len(cr) && cr[j].Stream == cr[i].Stream {
			j++
		}
		e := c.DebiasEffect(cr[i:j])
		sum += e.MeanShift * float64(e.Rows)
		n += e.Rows
		i = j
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
