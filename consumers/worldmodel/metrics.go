package worldmodel

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/internal/chatapi"
)

// scorerMetrics are an OpenAIScorer's request series. The scorer owns them and is itself a
// prometheus.Collector, so NewStage can serve them with the stage's metrics without the caller
// wiring a registry through the scorer's config.
type scorerMetrics struct {
	retries       *prometheus.CounterVec
	duration      prometheus.Histogram
	parseFailures prometheus.Counter
}

func newScorerMetrics() *scorerMetrics {
	m := &scorerMetrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_worldmodel_retries_total",
			Help: "World-model requests retried, by reason: 429, 5xx, timeout, transport.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "wmrl_worldmodel_request_duration_seconds",
			Help:    "Duration of one world-model HTTP request, from sending to the last byte of the reply (retries are separate requests).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		parseFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_worldmodel_score_parse_failures_total",
			Help: "World-model replies from which no score could be parsed (the rollout is recorded as invalid).",
		}),
	}
	// Every reason exists from the start, so rate() sees a 0 before the first retry.
	for _, r := range []string{chatapi.ReasonRateLimited, chatapi.ReasonServerError, chatapi.ReasonTimeout, chatapi.ReasonTransport} {
		m.retries.WithLabelValues(r)
	}
	return m
}

func (m *scorerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.retries, m.duration, m.parseFailures}
}

// Describe implements prometheus.Collector.
func (s *OpenAIScorer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s.metrics.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s *OpenAIScorer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s.metrics.collectors() {
		c.Collect(ch)
	}
}

var _ prometheus.Collector = (*OpenAIScorer)(nil)

// failureStatuses are the statuses counted in wmrl_worldmodel_failures_total.
var failureStatuses = []Status{StatusTimeout, StatusError, StatusInvalid}

// newFailures makes the handler's failure counter, every status present from the start.
func newFailures() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wmrl_worldmodel_failures_total",
		Help: "Rollouts recorded with a failure instead of a score, by status: timeout, error, invalid.",
	}, []string{"status"})
	for _, s := range failureStatuses {
		c.WithLabelValues(string(s))
	}
	return c
}
