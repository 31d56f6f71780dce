package correct

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every result value the code counts in wmrl_correct_records_total{result} is named in the
// metric's help text: the help once listed four of the eight.
func TestRecordsHelpNamesEveryResult(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.records.WithLabelValues("steps", resultBuffered).Inc()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	help := ""
	for _, f := range fams {
		if f.GetName() == "wmrl_correct_records_total" {
			help = f.GetHelp()
		}
	}
	if help == "" {
		t.Fatal("wmrl_correct_records_total not registered")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	constRE := regexp.MustCompile(`\bresult[A-Z]\w*\s*=\s*"([a-z_]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range constRE.FindAllSubmatch(b, -1) {
			found++
			if !regexp.MustCompile(`\b` + string(m[1]) + `\b`).MatchString(help) {
				t.Errorf("%s: result %q is counted but not named in the help %q", f, m[1], help)
			}
		}
	}
	if found < 8 {
		t.Fatalf("found %d result constants, want at least 8: the scan is broken", found)
	}
}
