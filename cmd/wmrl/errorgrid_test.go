package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestGridFamilyFlags: an unknown family or estimator fails before the eval
// set is built (which would take minutes), naming the flag.
func TestGridFamilyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grid-family", "nope"}, "--grid-family"},
		{[]string{"--grid-family", "calibration", "--grid-estimators", "ppo"}, "--grid-estimators"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			root := newRoot(&app{stdout: &out, stderr: &out})
			root.SetArgs(append([]string{"simulate", "--error-grid", "--out", "", "--log-level=error"}, tc.args...))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(out.String(), "eval set ready") {
				t.Fatalf("error %v, want one naming %s before any work\n%s", err, tc.want, out.String())
			}
		})
	}
}
