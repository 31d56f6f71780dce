package grafana

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/worldmodel"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// stageRegistry builds the stages with their real constructors on one registry, without a broker
// or Redis (neither is contacted before Run): the world-model and sandbox stages (stage runtime,
// franz-go client metrics, their own series) and the correction consumer.
func stageRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	names := topics.NewNames("dashboard.")
	nowhere := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}

	scorer, err := worldmodel.NewOpenAIScorer(worldmodel.OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	wm, err := worldmodel.NewStage(stage.Config{Names: names, Registry: reg, KafkaOpts: nowhere},
		worldmodel.HandlerConfig{Scorer: scorer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wm.Client().Close)

	exec, err := sandbox.NewBuiltinExecutor(func(_ context.Context, _ sandbox.Job) (float64, error) { return 0, nil }, sandbox.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.NewPool(exec, 2)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.NewStage(stage.Config{Names: names, Registry: reg, KafkaOpts: nowhere}, sandbox.HandlerConfig{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Client().Close)

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := correct.NewConsumer(correct.Config{Names: names, KafkaOpts: nowhere, Redis: rdb,
		TransactionalID: "dashboard-test", Registry: reg}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// exporter answers whether a metric name is served from a registry.
type exporter struct {
	reg   *prometheus.Registry
	types map[string]dto.MetricType // of the families that already have a series
}

func newExporter(t *testing.T, reg *prometheus.Registry) *exporter {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e := &exporter{reg: reg, types: map[string]dto.MetricType{}}
	for _, mf := range mfs {
		e.types[mf.GetName()] = mf.GetType()
	}
	return e
}

// registered reports whether reg holds a collector describing name. A registry refuses a
// descriptor whose name it already has with a different help string (documented on
// prometheus.Registerer), which finds vectors that have no series yet; Gather would miss them.
func (e *exporter) registered(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "dashboard test probe"})
	if err := prometheus.NewRegistry().Register(probe); err != nil {
		return false // not a valid metric name at all
	}
	if err := e.reg.Register(probe); err != nil {
		return true
	}
	e.reg.Unregister(probe)
	return false
}

// exported reports whether a query may name this series: a registered metric, or the _bucket,
// _sum or _count series of a registered histogram (or summary). A vector with no series yet has
// no known type; then only a counter's name (…_total, by convention) is refused the suffixes.
func (e *exporter) exported(name string) bool {
	if e.registered(name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok || !e.registered(base) {
			continue
		}
		t, known := e.types[base]
		if !known {
			return !strings.HasSuffix(base, "_total")
		}
		return t == dto.MetricType_HISTOGRAM || (t == dto.MetricType_SUMMARY && suffix != "_bucket")
	}
	return false
}

var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers      = regexp.MustCompile(`\{[^{}]*\}`)
	ranges        = regexp.MustCompile(`\[[^\[\]]*\]`)
	grouping      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	grafanaVar    = regexp.MustCompile(`\$\{?\w+\}?`)
	number        = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[smhdwy]*\b`)
	identifier    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
)

// keywords are PromQL words that are neither functions (those are followed by a parenthesis)
// nor metric names.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true,
}

// metricNames extracts the metric names a PromQL expression selects: label matchers, ranges,
// string literals, grouping labels, Grafana variables and numbers are removed, and of the
// remaining identifiers, function and aggregation names (followed by a parenthesis) and
// keywords are dropped. A selector by __name__ is refused rather than guessed.
func metricNames(expr string) ([]string, error) {
	s := stringLiteral.ReplaceAllString(expr, `""`)
	if strings.Contains(s, "__name__") {
		return nil, fmt.Errorf("selects by __name__, which this check cannot follow: %s", expr)
	}
	for prev := ""; prev != s; {
		prev = s
		s = matchers.ReplaceAllString(s, " ")
		s = ranges.ReplaceAllString(s, " ")
	}
	s = grouping.ReplaceAllString(s, " ")
	s = grafanaVar.ReplaceAllString(s, " ")
	s = number.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if keywords[strings.ToLower(id)] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names, nil
}

// unknownMetrics lists the metrics expr names that e does not export.
func unknownMetrics(e *exporter, expr string) ([]string, error) {
	names, err := metricNames(expr)
	if err != nil {
		return nil, err
	}
	var unknown []string
	for _, n := range names {
		if !e.exported(n) {
			unknown = append(unknown, n)
		}
	}
	return unknown, nil
}

type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
}

// query is a variable's query, a string (datasource variables) or an object with a query field
// (Prometheus query variables).
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(Dashboard)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("wmrl.json: %v", err)
	}
	return d
}

// flatten returns every panel, rows' nested panels included.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`wmrl_stage_inflight`, []string{"wmrl_stage_inflight"}},
		{`sum by (stage, result) (rate(wmrl_stage_records_total[$__rate_interval]))`, []string{"wmrl_stage_records_total"}},
		{`sum(rate(x_total{stage="worldmodel", result=~"ok|dead_letter"}[5m])) without (topic)`, []string{"x_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_seconds_bucket[1m])))`, []string{"h_seconds_bucket"}},
		{`sum(a_busy) / sum(b_slots) > bool 0.5 and on(stage) group_left c`, []string{"a_busy", "b_slots", "c"}},
		{`label_values(wmrl_correct_sealed_step{run=~"$run"}, stream)`, []string{"wmrl_correct_sealed_step", "stream"}},
		{`g{kind="raw"} offset 1h unless g{kind="not_a_metric_total"}`, []string{"g"}},
		{`max_over_time(rate(m_total[5m])[1h:1m]) * 1e3`, []string{"m_total"}},
	}
	for _, tt := range tests {
		got, err := metricNames(tt.expr)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q", tt.expr, got, err, tt.want)
		}
	}
	if _, err := metricNames(`{__name__=~"wmrl_.*"}`); err == nil {
		t.Error("a __name__ selector was accepted unchecked")
	}
}

// TestUnknownMetrics shows the check against the stages' real registry: it passes known series
// and fails unknown ones.
func TestUnknownMetrics(t *testing.T) {
	e := newExporter(t, stageRegistry(t))
	tests := []struct {
		name, expr string
		want       []string
	}{
		{"stage counter", `sum by (stage) (rate(wmrl_stage_records_total[5m]))`, nil},
		{"stage vector without series yet", `sum by (reason) (rate(wmrl_stage_dead_letters_total[5m]))`, nil},
		{"histogram bucket", `histogram_quantile(0.9, sum by (le) (rate(wmrl_worldmodel_request_duration_seconds_bucket[5m])))`, nil},
		{"histogram count", `rate(wmrl_stage_handle_seconds_count[5m])`, nil},
		{"kafka client gauge", `wmrl_kafka_buffered_fetch_records`, nil},
		{"correct counter", `rate(wmrl_correct_transactions_total{result="aborted"}[5m])`, nil},
		{"misspelt name", `rate(wmrl_stage_record_total[5m])`, []string{"wmrl_stage_record_total"}},
		{"unknown beside a known one", `wmrl_stage_inflight / wmrl_stage_outflight`, []string{"wmrl_stage_outflight"}},
		{"bucket of a counter", `wmrl_stage_produced_total_bucket`, []string{"wmrl_stage_produced_total_bucket"}},
		{"sum of a counter vector with no series yet", `wmrl_stage_records_total_sum`, []string{"wmrl_stage_records_total_sum"}},
		{"count of a gauge", `wmrl_stage_inflight_count`, []string{"wmrl_stage_inflight_count"}},
		{"kprom's _total gauge is not exported", `wmrl_kafka_buffered_fetch_records_total`, []string{"wmrl_kafka_buffered_fetch_records_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := unknownMetrics(e, tt.expr)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("unknownMetrics(%q) = %q, %v; want %q", tt.expr, got, err, tt.want)
			}
		})
	}
}

// TestDashboardQueriesNameExportedMetrics is the dashboard's contract: every panel query and
// every variable query names only metrics a stage registers.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	e := newExporter(t, stageRegistry(t))
	var exprs int
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			exprs++
			unknown, err := unknownMetrics(e, tg.Expr)
			if err != nil {
				t.Errorf("panel %q %s: %v", p.Title, tg.RefID, err)
			}
			for _, n := range unknown {
				t.Errorf("panel %q %s names %s, which no stage exports: %s", p.Title, tg.RefID, n, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		q := v.query()
		if v.Type != "query" {
			continue
		}
		inner, ok := strings.CutPrefix(q, "label_values(")
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q)
			continue
		}
		// The last argument is a label, not a metric.
		sel := inner[:strings.LastIndex(inner, ",")]
		unknown, err := unknownMetrics(e, sel)
		if err != nil || len(unknown) > 0 {
			t.Errorf("variable %s names %q (%v), which no stage exports", v.Name, unknown, err)
		}
	}
	if exprs < 30 {
		t.Errorf("only %d queries found; the panel walk is broken", exprs)
	}
}

// TestDashboardShape pins what provisioning and the README rely on: the schema version, the
// datasource and run variables, every query on the datasource variable, distinct panel ids,
// and one row per area.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want ≥ 39", d.SchemaVersion)
	}
	if d.UID == "" {
		t.Error("dashboard has no uid; provisioning would duplicate it on every load")
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || v.query() != "prometheus" {
		t.Errorf("datasource variable = %+v, want type datasource over prometheus", v)
	}
	if v, ok := vars["run"]; !ok || v.Type != "query" || !strings.HasPrefix(v.query(), "label_values(") ||
		!strings.HasSuffix(v.query(), ", run)") || v.Datasource == nil || v.Datasource.UID != "${datasource}" {
		t.Errorf("run variable = %+v, want label_values(…, run) on ${datasource}", v)
	}
	ids := map[int]string{}
	var rows []string
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q datasource %+v, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: empty or not on ${datasource}", p.Title, tg.RefID)
			}
		}
	}
	if want := []string{"Pipeline", "Correction", "World model", "Sandbox"}; !slices.Equal(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
}

// TestRegisteredProbeLeavesNoTrace checks the probe unregisters itself, so checking a name that
// is not exported does not make it exported for the next check.
func TestRegisteredProbeLeavesNoTrace(t *testing.T) {
	e := newExporter(t, prometheus.NewRegistry())
	for range 2 {
		if e.registered("wmrl_not_a_metric") {
			t.Fatal("probe found a name that was never registered")
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil || len(mfs) != 0 {
		t.Fatalf("registry after probing: %v, %v; want empty", mfs, err)
	}
}
