// Package grafana holds wmrl's Grafana dashboard (wmrl.json), built on the metrics the stages
// export; its test checks that every query names a metric some stage really registers.
package grafana

import _ "embed"

// Dashboard is the dashboard JSON, for tools that provision it (import it in Grafana, or mount
// it where a dashboard provider reads).
//
//go:embed wmrl.json
var Dashboard []byte
