package stage

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/internal/oversize"
)

type metrics struct {
	records      *prometheus.CounterVec
	produced     prometheus.Counter
	inflight     prometheus.Gauge
	latency      prometheus.Histogram
	commitErrors prometheus.Counter
	lag          *prometheus.GaugeVec
	deadLetters  *prometheus.CounterVec
	// undeliverable: inputs skipped because Kafka refused their dead letter for good.
	undeliverable prometheus.Counter
	failureShare  prometheus.Gauge
	// batchesSkipped: record batches refused unread (oversize.MetricName).
	batchesSkipped *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, stage string) (*metrics, error) {
	labels := prometheus.Labels{"stage": stage}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, []string{label})
	}
	m := &metrics{
		records:  counterVec("wmrl_stage_records_total", "Input records by outcome: ok, failed (outputs produced that record a scoring or execution failure), dead_letter, skipped (dead letter refused), handed_back, produce_failed.", "result"),
		produced: counter("wmrl_stage_produced_total", "Output records produced."),
		inflight: gauge("wmrl_stage_inflight", "Input records being handled."),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wmrl_stage_handle_seconds", Help: "Time from dispatch to outputs acknowledged.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		commitErrors:   counter("wmrl_stage_commit_errors_total", "Failed offset commits (retried)."),
		lag:            NewLagGauge(stage),
		deadLetters:    counterVec("wmrl_stage_dead_letters_total", "Input records sent to the dead-letter topic, by the DLQ reason header (e.g. malformed-json, invalid-field:run_id).", "reason"),
		undeliverable:  counter("wmrl_stage_dead_letters_undeliverable_total", "ERROR: input records skipped because Kafka refused their dead letter for good (e.g. MESSAGE_TOO_LARGE)."),
		batchesSkipped: oversize.NewCounter(stage),
		failureShare:   gauge("wmrl_stage_failure_share", "Share of failed results (scoring or execution failures recorded as outputs) among the stage's last --failure-window results; /healthz/scoring fails above --max-failure-share."),
	}
	// ok and failed exist from the start, so a failure ratio is 0, not absent, before the first.
	m.records.WithLabelValues("ok")
	m.records.WithLabelValues(resultFailed)
	for _, c := range []prometheus.Collector{m.records, m.produced, m.inflight, m.latency, m.commitErrors, m.lag, m.deadLetters, m.failureShare, m.undeliverable, m.batchesSkipped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
