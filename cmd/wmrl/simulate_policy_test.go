package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAnchorPolicyFlag: an unknown --anchor-policy fails before the eval set is built, naming the
// flag and the policies there are.
func TestAnchorPolicyFlag(t *testing.T) {
	var out bytes.Buffer
	root := newRoot(&app{stdout: &out, stderr: &out})
	root.SetArgs([]string{"simulate", "--anchor-policy", "random,uncertain", "--out", "", "--log-level=error"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--anchor-policy") || !strings.Contains(err.Error(), "routed-noipw") ||
		strings.Contains(out.String(), "eval set") {
		t.Fatalf("error %v, want one naming --anchor-policy and the policies before any work\n%s", err, out.String())
	}
}

// TestErrorGridEstimatorsAndPaired: with policies beside random and --grid-estimators given, the
// bias family runs every estimator (its tables under --out/<estimator>/) and writes paired.csv
// with one row per estimator × cell × policy arm, and paired.md.
func TestErrorGridEstimatorsAndPaired(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an eval set (seconds of executions)")
	}
	out := t.TempDir()
	var buf bytes.Buffer
	root := newRoot(&app{stdout: &buf, stderr: &buf})
	root.SetArgs([]string{"simulate", "--error-grid", "--arms", "wmrl", "--anchor-policy", "random,routed",
		"--grid-estimators", "grpo,drgrpo", "--grid-bias", "0", "--grid-noise", "0,0.3", "--seeds", "2", "--steps", "3",
		"--eval-problems", "1", "--out", out, "--log-level=error"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for _, f := range []string{"grpo/error_grid.csv", "drgrpo/error_grid.csv", pairedMD} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, pairedCSV))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows[1:] {
		got = append(got, strings.Join(r[:5], " "))
	}
	want := []string{
		"grpo 0 0 wmrl-routed wmrl", "grpo 0 0.3 wmrl-routed wmrl",
		"drgrpo 0 0 wmrl-routed wmrl", "drgrpo 0 0.3 wmrl-routed wmrl",
	}
	if rows[0][0] != "estimator" || !slices.Equal(got, want) {
		t.Errorf("paired.csv header %v rows %q, want %q", rows[0][:5], got, want)
	}
	if !strings.Contains(buf.String(), "estimator drgrpo, B = 0, σ = 0.3") {
		t.Errorf("no paired table per cell in the output:\n%s", buf.String())
	}
}
