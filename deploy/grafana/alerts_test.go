package grafana

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRulesNameExportedMetrics is the alert file's contract, as for the dashboard: every
// rule's expression names only metrics a stage registers, and each rule is well formed
// (a name, a severity, a summary, a valid for: duration).
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(Alerts)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	e := newExporter(t, stageRegistry(t))
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v lacks a name, severity or summary", r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			unknown, err := unknownMetrics(e, r.Expr)
			if err != nil {
				t.Errorf("rule %s: %v", r.Alert, err)
			}
			for _, n := range unknown {
				t.Errorf("rule %s names %s, which no stage exports: %s", r.Alert, n, r.Expr)
			}
		}
	}
	// The dashboard's panel descriptions and the docs name these two.
	for _, want := range []string{"WmrlScoringFailures", "WmrlStepsMostlyMasked"} {
		if !alerts[want] {
			t.Errorf("alerts.yaml has no rule %s", want)
		}
	}
}
