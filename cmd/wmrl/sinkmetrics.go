package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/sinks/analytics"
)

// sinkProbe is the /healthz and /readyz state of a sink command (train, analytics): live while
// its loop runs, ready while its cluster also answered the last ping.
type sinkProbe struct {
	running atomic.Bool
	cluster atomic.Pointer[error] // nil: not pinged yet
}

func (p *sinkProbe) live() error {
	if !p.running.Load() {
		return errors.New("not running")
	}
	return nil
}

func (p *sinkProbe) ready() error {
	if err := p.live(); err != nil {
		return err
	}
	e := p.cluster.Load()
	switch {
	case e == nil:
		return errors.New("kafka not reached yet")
	case *e != nil:
		return fmt.Errorf("kafka unreachable: %w", *e)
	}
	return nil
}

// watch pings the cluster with a client of its own until ctx ends.
func (p *sinkProbe) watch(ctx context.Context, opts []kgo.Opt) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		p.cluster.Store(&err)
		return
	}
	defer cl.Close()
	health.Watch(ctx, cl, func(_ context.Context, err error) { p.cluster.Store(&err) })
}

// serveSink serves /metrics from reg and a probe's /healthz and /readyz on addr (empty: off):
// live from now until stop, ready while the cluster also answers the probe's pings. stop ends both.
func serveSink(ctx context.Context, addr string, reg *prometheus.Registry, opts []kgo.Opt, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	probe := &sinkProbe{}
	srv, err := health.Serve(addr, reg, probe.live, probe.ready, log)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	go probe.watch(wctx, opts)
	probe.running.Store(true)
	return func() { probe.running.Store(false); cancel(); srv.Stop() }, nil
}

// trainMetrics are wmrl_train_*: what a trainer consumed and acknowledged.
type trainMetrics struct {
	steps, rows prometheus.Counter
	lastStep    prometheus.Gauge
}

func newTrainMetrics(reg prometheus.Registerer) (*trainMetrics, error) {
	m := &trainMetrics{
		steps:    prometheus.NewCounter(prometheus.CounterOpts{Name: "wmrl_train_steps_total", Help: "Steps reassembled and acknowledged."}),
		rows:     prometheus.NewCounter(prometheus.CounterOpts{Name: "wmrl_train_rows_total", Help: "Advantage rows of acknowledged steps."}),
		lastStep: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wmrl_train_last_step", Help: "Step number of the last acknowledged step."}),
	}
	for _, c := range []prometheus.Collector{m.steps, m.rows, m.lastStep} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// registerTapMetrics exports the tap's counters as wmrl_analytics_*_total, read at scrape time.
func registerTapMetrics(reg prometheus.Registerer, tap *analytics.Tap) error {
	for _, c := range []struct {
		name, help string
		get        func(analytics.Stats) int64
	}{
		{"wmrl_analytics_messages_total", "Messages fetched.", func(s analytics.Stats) int64 { return s.Messages }},
		{"wmrl_analytics_hidden_total", "Aborted records and transaction markers dropped (kafka-go does not honour read_committed).", func(s analytics.Stats) int64 { return s.Hidden }},
		{"wmrl_analytics_steps_total", "Advantage steps written.", func(s analytics.Stats) int64 { return s.Steps }},
		{"wmrl_analytics_rows_total", "Advantage rows written.", func(s analytics.Stats) int64 { return s.Rows }},
		{"wmrl_analytics_calibration_total", "Calibration snapshots written.", func(s analytics.Stats) int64 { return s.Calibration }},
		{"wmrl_analytics_files_total", "Parquet files closed.", func(s analytics.Stats) int64 { return s.Files }},
		{"wmrl_analytics_skipped_total", "Undecodable records skipped.", func(s analytics.Stats) int64 { return s.Skipped }},
	} {
		get := c.get
		f := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 { return float64(get(tap.Stats())) })
		if err := reg.Register(f); err != nil {
			return err
		}
	}
	return nil
}
