package main

import (
	"bytes"
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
