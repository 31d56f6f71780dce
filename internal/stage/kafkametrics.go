package stage

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaMetrics returns the franz-go hooks that export a client's metrics with prefix wmrl_kafka_
// and a stage label. kprom names two gauges as if they were counters
// (buffered_{produce,fetch}_records_total); they are exported as wmrl_kafka_buffered_produce_records
// and wmrl_kafka_buffered_fetch_records instead, so rate() is never applied to a gauge.
func KafkaMetrics(reg prometheus.Registerer, stage string) []kgo.Hook {
	labels := prometheus.Labels{"stage": stage}
	kp := kprom.NewMetrics("wmrl_kafka",
		kprom.Registerer(skipRegisterer{Registerer: reg, skip: map[string]bool{
			"wmrl_kafka_buffered_produce_records_total": true,
			"wmrl_kafka_buffered_fetch_records_total":   true,
		}}),
		kprom.WithStaticLabel(labels))
	return []kgo.Hook{kp, &bufferGauges{reg: reg, labels: labels}}
}

// bufferGauges registers the renamed buffered-record gauges when the client exists and removes
// them when it closes, as kprom does with its own series.
type bufferGauges struct {
	reg              prometheus.Registerer
	labels           prometheus.Labels
	produce, consume prometheus.GaugeFunc
}

func (b *bufferGauges) OnNewClient(cl *kgo.Client) {
	b.produce = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wmrl_kafka_buffered_produce_records", Help: "Records buffered in the client, waiting to be produced.", ConstLabels: b.labels,
	}, func() float64 { return float64(cl.BufferedProduceRecords()) })
	b.consume = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wmrl_kafka_buffered_fetch_records", Help: "Records fetched into the client, waiting to be polled.", ConstLabels: b.labels,
	}, func() float64 { return float64(cl.BufferedFetchRecords()) })
	// kprom panics on a duplicate registration; these are best effort instead, like a missing
	// series on a shared registry.
	_ = b.reg.Register(b.produce)
	_ = b.reg.Register(b.consume)
}

func (b *bufferGauges) OnClientClosed(*kgo.Client) {
	b.reg.Unregister(b.produce)
	b.reg.Unregister(b.consume)
}

var (
	_ kgo.HookNewClient    = (*bufferGauges)(nil)
	_ kgo.HookClientClosed = (*bufferGauges)(nil)
)

// skipRegisterer passes registrations to Registerer except collectors whose only metric name is
// in skip; kprom has no option to rename or leave out a series.
type skipRegisterer struct {
	prometheus.Registerer
	skip map[string]bool
}

func (r skipRegisterer) Register(c prometheus.Collector) error {
	if r.skip[collectorName(c)] {
		return nil
	}
	return r.Registerer.Register(c)
}

func (r skipRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// collectorName is the fully-qualified name of a collector that describes exactly one metric,
// and "" otherwise. client_golang exposes a Desc's name only through its String form.
func collectorName(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		names = append(names, descName(d))
	}
	if len(names) != 1 {
		return ""
	}
	return names[0]
}

// descName returns a Desc's fully-qualified metric name, parsed from its String form
// (`Desc{fqName: "name", ...}`), or "" when that form is not recognised.
func descName(d *prometheus.Desc) string {
	s, ok := strings.CutPrefix(d.String(), `Desc{fqName: "`)
	name, _, closed := strings.Cut(s, `"`)
	if !ok || !closed {
		return ""
	}
	return name
}
