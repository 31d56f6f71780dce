package sandbox

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// poolMetrics are the sandbox's domain series (prefix wmrl_sandbox_): what
// the executions ended in, how long they held a slot, and how busy the slots
// are — the anchor stream's budget (README.md: execution is the bottleneck).
type poolMetrics struct {
	jobs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	busy      prometheus.Gauge
	slots     prometheus.Gauge
	busyNanos prometheus.Counter
}

// Result label values of wmrl_sandbox_jobs_total and the duration histogram.
const (
	resultOOM      = "oom"
	resultCanceled = "canceled"
)

func newPoolMetrics(slots int) *poolMetrics {
	m := &poolMetrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_sandbox_jobs_total",
			Help: "Finished sandbox executions by result: ok, timeout, error, oom (killed for exceeding the memory cgroup limit), invalid, canceled (shutdown; the rollout is redelivered).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wmrl_sandbox_job_duration_seconds", Help: "Time a sandbox execution held its slot, by result.",
			// 10 ms to ~11 min: the reference cap is 600 s.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 17),
		}, []string{"result"}),
		busy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wmrl_sandbox_slots_busy", Help: "Execution slots running a job now.",
		}),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wmrl_sandbox_slots", Help: "Execution slots in the pool.",
		}),
		busyNanos: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_sandbox_slot_busy_seconds_total",
			Help: "Summed slot-busy time of finished jobs; rate() over wmrl_sandbox_slots is the slot utilisation.",
		}),
	}
	m.slots.Set(float64(slots))
	return m
}

// resultLabel names a result for the metrics: OOM kills and cancellations
// are told apart from other errors because they call for different action.
func resultLabel(r Result) string {
	switch {
	case r.canceled:
		return resultCanceled
	case r.oom:
		return resultOOM
	case r.Status == StatusOK, r.Status == StatusTimeout, r.Status == StatusInvalid:
		return r.Status.String()
	}
	return StatusError.String()
}

func (m *poolMetrics) done(r Result, held time.Duration) {
	label := resultLabel(r)
	m.jobs.WithLabelValues(label).Inc()
	m.duration.WithLabelValues(label).Observe(held.Seconds())
	m.busyNanos.Add(held.Seconds())
}

// instrument registers the pool's metrics on reg; the stage calls it with
// its own registry so they are served next to the stage's.
func (p *Pool) instrument(reg prometheus.Registerer) error {
	m := p.metrics
	for _, c := range []prometheus.Collector{m.jobs, m.duration, m.busy, m.slots, m.busyNanos} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("sandbox: register metrics: %w", err)
		}
	}
	return nil
}
