package correct

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// metrics are the consumer's Prometheus series (prefix wmrl_correct_).
type metrics struct {
	records      *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	dlqRefused   prometheus.Counter // records skipped: Kafka refused their dead letter (deadletters.go)
	dlqHeld      prometheus.Gauge   // dead letters waiting for the offsets to pass their source
	activeRuns   prometheus.Gauge   // runs held in memory (runend.go)
	sealedSteps  prometheus.Counter
	rows         prometheus.Counter
	txns         *prometheus.CounterVec
	rebuilds     *prometheus.CounterVec
	digestAlarms prometheus.Counter
	redisTrips   prometheus.Counter
	redisErrors  prometheus.Counter
	redisLost    prometheus.Counter
	buffered     prometheus.Gauge
	sealLatency  prometheus.Histogram
	lag          *prometheus.GaugeVec
	// Per (run, stream), from the snapshot of the last committed step.
	calError     *prometheus.GaugeVec
	anchorWeight *prometheus.GaugeVec
	fitVersion   *prometheus.GaugeVec
	windowPairs  *prometheus.GaugeVec
	sealedStep   *prometheus.GaugeVec
	maskedShare  *prometheus.GaugeVec
	debias       *debiasMetrics // debias.go
	maskedRows   prometheus.Counter
	staleRows    prometheus.Counter
	reinits      prometheus.Counter
	trips        atomic.Int64 // mirror of redisTrips for the benchmark
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_correct_records_total",
			Help: "Input records by topic and result: buffered, duplicate (identical to a buffered one), sealed_duplicate (step already sealed), dead_letter.",
		}, []string{"topic", "result"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_correct_dead_letters_total", Help: "Dead letters in committed transactions, by DLQ reason.",
		}, []string{"reason"}),
		sealedSteps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_steps_sealed_total", Help: "Steps sealed in committed transactions.",
		}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_rows_total", Help: "Advantage rows in committed transactions.",
		}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_correct_transactions_total", Help: "Transactions by outcome: committed or aborted.",
		}, []string{"result"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wmrl_correct_state_rebuilds_total", Help: "(run, stream) states Redis did not hold as the changelog does on assignment, repaired from the changelog, by reason: missing, behind, ahead, mismatch.",
		}, []string{"reason"}),
		digestAlarms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_redis_digest_mismatch_total", Help: "ALARM: Redis held different content for an already sealed (run, stream, step).",
		}),
		redisTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_redis_roundtrips_total", Help: "Redis round trips (a command or a pipeline), counted by a go-redis hook.",
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_redis_errors_total", Help: "Failed Redis snapshot writes or loads (the changelog stays authoritative).",
		}),
		redisLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_redis_state_lost_total",
			Help: "(run, stream) states Redis was found not to hold although it should (its data was lost): on assignment, or when a step's predecessor is missing; each is rewritten in full.",
		}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wmrl_correct_buffered_steps", Help: "Unsealed steps held in memory.",
		}),
		sealLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wmrl_correct_seal_seconds", Help: "Time from a step's last input record to its transaction commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: stage.NewLagGauge("correct"),
		calError: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wmrl_correct_calibration_error",
			Help: "Mean (predicted − executed) over the last sealed step's anchor pairs: kind=raw before Online Debiasing, kind=debiased after the map in force for the step.",
		}, []string{"run", "stream", "kind"}),
		anchorWeight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wmrl_correct_anchor_weight", Help: "IVD weight of anchor rows for the next step (world-model rows weigh 1).",
		}, []string{"run", "stream"}),
		fitVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wmrl_correct_fit_version", Help: "Refits of the calibration map so far.",
		}, []string{"run", "stream"}),
		windowPairs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wmrl_correct_window_pairs", Help: "Anchor pairs in the sliding calibration window.",
		}, []string{"run", "stream"}),
		sealedStep: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wmrl_correct_sealed_step", Help: "Last step sealed in a committed transaction.",
		}, []string{"run", "stream"}),
		reinits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_session_reinits_total", Help: "New transactional sessions after the broker fenced a transaction that timed out during an outage.",
		}),
		staleRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wmrl_correct_stale_rows_total", Help: "Advantage rows masked as stale (--max-staleness) in committed transactions.",
		}),
	}
	m.maskedShare, m.maskedRows = newMaskedMetrics()
	for _, c := range []prometheus.Collector{m.records, m.deadLetters, m.sealedSteps, m.rows, m.txns, m.rebuilds,
		m.digestAlarms, m.redisTrips, m.redisErrors, m.redisLost, m.buffered, m.sealLatency, m.lag,
		m.calError, m.anchorWeight, m.fitVersion, m.windowPairs, m.sealedStep, m.staleRows, m.reinits,
		m.maskedShare, m.maskedRows} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.dlqRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wmrl_correct_dead_letters_undeliverable_total",
		Help: "ERROR: input records skipped because Kafka refused their dead letter for good (e.g. MESSAGE_TOO_LARGE on a DLQ topic with a small max.message.bytes).",
	})
	m.activeRuns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wmrl_correct_active_runs",
		Help: "Runs this instance holds in memory: seen and not yet retired by their end-of-run record.",
	})
	m.dlqHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wmrl_correct_dead_letters_held",
		Help: "Dead letters judged but not written yet: they wait for the transaction that commits past their source, which a step that never completes holds back on its partition.",
	})
	for _, c := range []prometheus.Collector{m.dlqRefused, m.dlqHeld, m.activeRuns} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.debias, err = newDebiasMetrics(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// observe sets the per-(run, stream) gauges from a committed snapshot.
func (m *metrics) observe(sn *topics.CalibrationSnapshot) {
	m.calError.WithLabelValues(sn.RunID, sn.Stream, "raw").Set(sn.BiasBefore)
	m.calError.WithLabelValues(sn.RunID, sn.Stream, "debiased").Set(sn.BiasAfter)
	m.anchorWeight.WithLabelValues(sn.RunID, sn.Stream).Set(sn.AnchorWeight)
	m.fitVersion.WithLabelValues(sn.RunID, sn.Stream).Set(float64(sn.FitVersion))
	m.windowPairs.WithLabelValues(sn.RunID, sn.Stream).Set(float64(sn.Pairs))
	m.sealedStep.WithLabelValues(sn.RunID, sn.Stream).Set(float64(sn.Step))
	m.debias.observe(sn)
}

// forgetStreams drops every per-(run, stream) series: after a reassignment the instance reports
// only the runs it now owns, as their next steps seal.
func (m *metrics) forgetStreams() {
	for _, g := range []*prometheus.GaugeVec{m.calError, m.anchorWeight, m.fitVersion, m.windowPairs, m.sealedStep, m.maskedShare} {
		g.Reset()
	}
	m.debias.reset()
}

func (m *metrics) record(k kind, result string) {
	m.records.WithLabelValues(k.String(), result).Inc()
}

// tripHook counts Redis round trips: every command and every pipeline (MULTI/EXEC or plain) is one.
type tripHook struct{ m *metrics }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// The connection handshake go-redis runs on every new pooled connection (HELLO, CLIENT SETINFO)
// also passes the hooks; it is per connection, not per step, so it is not counted.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.m.redisTrips.Inc()
			h.m.trips.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			h.m.redisTrips.Inc()
			h.m.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = tripHook{}
