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
	records       *prometheus.CounterVec
	bufferedRecs  [numKinds]atomic.Pointer[counter] // records' result=buffered series by kind (record)
	deadLetters   *prometheus.CounterVec
	dlqRefused    prometheus.Counter // records skipped: Kafka refused their dead letter (deadletters.go)
	dlqHeld       prometheus.Gauge   // dead letters waiting for the offsets to pass their source
	activeRuns    prometheus.Gauge   // runs held in memory (runend.go)
	stateBytes    prometheus.Gauge   // estimated bytes of the live states (engine.stateBytes)
	rebuildStates prometheus.Gauge   // states installed by the last rebuild from the changelog
	tombstoned    prometheus.Counter // ended runs whose changelog keys were tombstoned (retention.go)
	idleEnded     prometheus.Counter // idle runs ended by a published end-of-run record (idle.go)
	sealedSteps   prometheus.Counter
	rows          prometheus.Counter
	txns          *prometheus.CounterVec
	rebuilds      *prometheus.CounterVec
	digestAlarms  prometheus.Counter
	redisTrips    prometheus.Counter
	redisErrors   prometheus.Counter
	redisLost     prometheus.Counter
	buffered      prometheus.Gauge
	sealLatency   prometheus.Histogram
	lag           *prometheus.GaugeVec
	// Per (run, stream), from the snapshot of the last committed step.
	calError     *prometheus.GaugeVec
	anchorWeight *prometheus.GaugeVec
	fitVersion   *prometheus.GaugeVec
	windowPairs  *prometheus.GaugeVec
	sealedStep   *prometheus.GaugeVec
	maskedShare  *prometheus.GaugeVec
	gateClosed   *prometheus.GaugeVec // --trust-gate only
	gateRho      *prometheus.GaugeVec
	debias       *debiasMetrics // debias.go
	maskedRows   prometheus.Counter
	staleRows    prometheus.Counter
	reinits      prometheus.Counter
	runsRefused  prometheus.Counter // records refused too-many-runs (flood.go)
	aggregated   prometheus.Counter // dead letters folded into aggregates (flood.go)
	trips        atomic.Int64       // mirror of redisTrips for the benchmark
}

// series makes the consumer's collectors and registers each on reg as it is made. After the
// first failed registration the rest are made but not registered, and err keeps that failure.
type series struct {
	reg prometheus.Registerer
	err error
}

func (s *series) add(c prometheus.Collector) {
	if s.err == nil {
		s.err = s.reg.Register(c)
	}
}

func (s *series) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	s.add(c)
	return c
}

func (s *series) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	s.add(g)
	return g
}

func (s *series) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	s.add(c)
	return c
}

func (s *series) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	s.add(g)
	return g
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	s := &series{reg: reg}
	m := &metrics{
		records: s.counterVec("wmrl_correct_records_total",
			"Input records by topic (steps, predicted, executed; runs for the run-control topic; a topic correct does not read by its name) and result: buffered, duplicate (identical to a buffered one), sealed_duplicate (step already sealed), dead_letter, dead_letter_undeliverable (its dead letter refused for good: skipped), idle_end_ignored (an idle end-of-run record for a run that went on or ended otherwise), batch_too_large (a batch skipped unread: counted once per batch), foreign_topic (a record of a topic correct does not read); relayed for end requests of the run-control topic.",
			"topic", "result"),
		deadLetters:  s.counterVec("wmrl_correct_dead_letters_total", "Dead letters in committed transactions, by DLQ reason.", "reason"),
		sealedSteps:  s.counter("wmrl_correct_steps_sealed_total", "Steps sealed in committed transactions."),
		rows:         s.counter("wmrl_correct_rows_total", "Advantage rows in committed transactions."),
		txns:         s.counterVec("wmrl_correct_transactions_total", "Transactions by outcome: committed or aborted.", "result"),
		rebuilds:     s.counterVec("wmrl_correct_state_rebuilds_total", "(run, stream) states Redis did not hold as the changelog does on assignment, repaired from the changelog, by reason: missing, behind, ahead, mismatch.", "reason"),
		digestAlarms: s.counter("wmrl_correct_redis_digest_mismatch_total", "ALARM: Redis held different content for an already sealed (run, stream, step)."),
		redisTrips:   s.counter("wmrl_correct_redis_roundtrips_total", "Redis round trips (a command or a pipeline), counted by a go-redis hook."),
		redisErrors:  s.counter("wmrl_correct_redis_errors_total", "Failed Redis snapshot writes or loads (the changelog stays authoritative)."),
		redisLost: s.counter("wmrl_correct_redis_state_lost_total",
			"(run, stream) states Redis was found not to hold although it should (its data was lost): on assignment, or when a step's predecessor is missing; each is rewritten in full."),
		buffered: s.gauge("wmrl_correct_buffered_steps", "Unsealed steps held in memory."),
		sealLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wmrl_correct_seal_seconds", Help: "Time from a step's last input record to its transaction commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: stage.NewLagGauge("correct"),
		calError: s.gaugeVec("wmrl_correct_calibration_error",
			"Mean (predicted − executed) over the last sealed step's anchor pairs: kind=raw before Online Debiasing, kind=debiased after the map in force for the step.",
			"run", "stream", "kind"),
		anchorWeight: s.gaugeVec("wmrl_correct_anchor_weight", "IVD weight of anchor rows for the next step (world-model rows weigh 1).", "run", "stream"),
		fitVersion:   s.gaugeVec("wmrl_correct_fit_version", "Refits of the calibration map so far.", "run", "stream"),
		windowPairs:  s.gaugeVec("wmrl_correct_window_pairs", "Anchor pairs in the sliding calibration window.", "run", "stream"),
		sealedStep:   s.gaugeVec("wmrl_correct_sealed_step", "Last step sealed in a committed transaction.", "run", "stream"),
		gateClosed: s.gaugeVec("wmrl_correct_trust_gate_closed",
			"--trust-gate: 1 when the last sealed step's world-model rows were masked because the window's anchor pairs showed the world model uninformative (Pearson rho < 1/sqrt(n-2), n >= 10 pairs), else 0; absent without --trust-gate.",
			"run", "stream"),
		gateRho: s.gaugeVec("wmrl_correct_trust_gate_rho",
			"--trust-gate: Pearson correlation of world-model and executed scores over the window's anchor pairs that decided the last sealed step's gate (0 when either side is constant).",
			"run", "stream"),
		reinits:   s.counter("wmrl_correct_session_reinits_total", "New transactional sessions after the broker fenced a transaction that timed out during an outage."),
		staleRows: s.counter("wmrl_correct_stale_rows_total", "Advantage rows masked as stale (--max-staleness) in committed transactions."),
		dlqRefused: s.counter("wmrl_correct_dead_letters_undeliverable_total",
			"ERROR: input records skipped because Kafka refused their dead letter for good (e.g. MESSAGE_TOO_LARGE on a DLQ topic with a small max.message.bytes)."),
		activeRuns: s.gauge("wmrl_correct_active_runs",
			"Runs this instance holds in memory: seen and not yet retired by their end-of-run record."),
		dlqHeld: s.gauge("wmrl_correct_dead_letters_held",
			"Dead letters judged but not written yet: they wait for the transaction that commits past their source, which a step that never completes holds back on its partition."),
		stateBytes: s.gauge("wmrl_correct_state_bytes",
			"Estimated bytes of the live (run, stream) correction states this instance holds: 16 per window pair plus the head (fit breakpoints and fixed fields); buffered steps are not counted (see wmrl_correct_buffered_steps)."),
		rebuildStates: s.gauge("wmrl_correct_rebuild_states",
			"(run, stream) states the last rebuild from the calibration changelog installed (ended runs are not installed)."),
		tombstoned: s.counter("wmrl_correct_ended_runs_tombstoned_total",
			"Ended runs whose calibration changelog keys were tombstoned after --ended-run-retention, in committed transactions."),
		runsRefused: s.counter("wmrl_correct_runs_refused_total",
			"WARN: records of new runs dead-lettered too-many-runs because the instance held --max-active-runs runs (judgments: a record re-read after a restart counts again)."),
		aggregated: s.counter("wmrl_correct_dead_letters_aggregated_total",
			"WARN: dead letters folded into one dead letter by reference per partition (reason dead-letters-exceeded) because --max-held-dead-letters waited for their transaction (judgments)."),
		idleEnded: s.counter("wmrl_correct_idle_ends_total",
			"End-of-run records published for runs without input for --run-idle-timeout, in committed transactions."),
	}
	s.add(m.sealLatency)
	s.add(m.lag)
	m.maskedShare, m.maskedRows = newMaskedMetrics(s)
	m.debias = newDebiasMetrics(s)
	if s.err != nil {
		return nil, s.err
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
	if g := sn.Gate; g != nil {
		closed := 0.0
		if g.Closed {
			closed = 1
		}
		m.gateClosed.WithLabelValues(sn.RunID, sn.Stream).Set(closed)
		m.gateRho.WithLabelValues(sn.RunID, sn.Stream).Set(g.Rho)
	}
	m.debias.observe(sn)
}

// streamVecs are the per-(run, stream) gauges besides the debias ones.
func (m *metrics) streamVecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.calError, m.anchorWeight, m.fitVersion, m.windowPairs, m.sealedStep, m.maskedShare, m.gateClosed, m.gateRho}
}

// forgetStreams drops every per-(run, stream) series: after a reassignment the instance reports
// only the runs it now owns, as their next steps seal.
func (m *metrics) forgetStreams() {
	for _, g := range m.streamVecs() {
		g.Reset()
	}
	m.debias.reset()
}

// record counts an input record. The buffered series, one per input record on the hot path, are
// looked up once (WithLabelValues hashes and locks on every call) and kept; lazily, so that a
// series appears only when counted, as before.
func (m *metrics) record(k kind, result string) {
	if result != resultBuffered || k >= numKinds {
		m.records.WithLabelValues(k.String(), result).Inc()
		return
	}
	c := m.bufferedRecs[k].Load()
	if c == nil {
		c = &counter{m.records.WithLabelValues(k.String(), result)}
		m.bufferedRecs[k].Store(c)
	}
	c.Inc()
}

// counter boxes a prometheus.Counter for an atomic.Pointer.
type counter struct{ prometheus.Counter }

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
