package correct

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// debiasMetrics are the per-(run, stream) gauges of what Online Debiasing did to the last sealed
// step's world-model advantages (correction.DebiasEffect, carried in the calibration snapshot):
// under std-normalised GRPO a monotone map can leave the gradient untouched, and these say
// whether it does in this run.
type debiasMetrics struct {
	shift, reordered, flattened, groups *prometheus.GaugeVec
}

func newDebiasMetrics(s *series) *debiasMetrics {
	vec := func(name, help string) *prometheus.GaugeVec { return s.gaugeVec(name, help, "run", "stream") }
	return &debiasMetrics{
		shift: vec("wmrl_correct_debias_advantage_shift",
			"Mean |A(f(r̂)) − A(r̂)| over the last sealed step's unmasked world-model rows: how far the calibration map moved their advantages (0: OD did not reach the gradient)."),
		reordered: vec("wmrl_correct_debias_reordered_share",
			"Share of the last sealed step's world-model groups whose order or ties the calibration map changed."),
		flattened: vec("wmrl_correct_debias_flattened_groups",
			"World-model groups of the last sealed step that the calibration map flattened to zero spread (advantage 0 for all)."),
		groups: vec("wmrl_correct_debias_groups",
			"World-model groups of the last sealed step with at least two unmasked rows (the denominator of the reordered share)."),
	}
}

func (d *debiasMetrics) vecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{d.shift, d.reordered, d.flattened, d.groups}
}

// observe sets the gauges from a committed snapshot; one without the effect leaves them alone.
func (d *debiasMetrics) observe(sn *topics.CalibrationSnapshot) {
	e := sn.Debias
	if e == nil {
		return
	}
	share := 0.0
	if e.Groups > 0 {
		share = float64(e.Reordered) / float64(e.Groups)
	}
	d.shift.WithLabelValues(sn.RunID, sn.Stream).Set(e.MeanShift)
	d.reordered.WithLabelValues(sn.RunID, sn.Stream).Set(share)
	d.flattened.WithLabelValues(sn.RunID, sn.Stream).Set(float64(e.Flattened))
	d.groups.WithLabelValues(sn.RunID, sn.Stream).Set(float64(e.Groups))
}

func (d *debiasMetrics) reset() {
	for _, g := range d.vecs() {
		g.Reset()
	}
}

// debiasShift is the snapshot form of a step's debias effect.
func debiasShift(e correction.DebiasEffect) *topics.DebiasShift {
	return &topics.DebiasShift{Rows: e.Rows, Groups: e.Groups, Reordered: e.Reordered,
		Flattened: e.Flattened, MeanShift: e.MeanShift}
}
