package stage

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
)

// NewLagGauge is wmrl_stage_consumer_lag_records{stage, topic}: one definition for every
// consuming stage (the generic runtime here and the correction consumer), so one dashboard
// query covers them all.
func NewLagGauge(stage string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "wmrl_stage_consumer_lag_records",
		Help:        "Records of an input topic not yet committed by the stage's group (refreshed every 2s).",
		ConstLabels: prometheus.Labels{"stage": stage},
	}, []string{"topic"})
}

// RefreshLag sets g per input topic from group's committed offsets and the partitions' ends; a
// failed lookup leaves the last values (the readiness check reports the cluster instead).
func RefreshLag(ctx context.Context, adm *kadm.Client, group string, topics []string, g *prometheus.GaugeVec) {
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		return
	}
	l, ok := lags[group]
	if !ok || l.Error() != nil {
		return
	}
	byTopic := l.Lag.TotalByTopic() // positive lags only, as a gauge of records behind wants
	for _, topic := range topics {
		g.WithLabelValues(topic).Set(float64(byTopic[topic].Lag))
	}
}
