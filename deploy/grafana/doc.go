// Package grafana holds wmrl's Grafana dashboard (wmrl.json) and Prometheus alerting rules
// (alerts.yaml), built on the metrics the stages export; its tests check that every query and
// every rule expression names a metric some stage really registers.
package grafana

import _ "embed"

// Dashboard is the dashboard JSON, for tools that provision it (import it in Grafana, or mount
// it where a dashboard provider reads).
//
//go:embed wmrl.json
var Dashboard []byte

// Alerts are the Prometheus alerting rules (rule_files in prometheus.yml, or Grafana
// data-source-managed rules).
//
//go:embed alerts.yaml
var Alerts []byte
