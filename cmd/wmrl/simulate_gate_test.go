package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestParseTrustGates(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []bool
		err  bool
	}{
		{[]string{"off"}, []bool{false}, false},
		{[]string{"on"}, []bool{true}, false},
		{[]string{"off", "on"}, []bool{false, true}, false},
		{[]string{"ON", " off ", "on"}, []bool{true, false}, false},
		{[]string{"yes"}, nil, true},
	} {
		got, err := parseTrustGates(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestTrustGateFlag: a bad --trust-gate fails before the eval set is built, naming the flag; the
// calibration family, whose arms are fixed, refuses the gate the same way.
func TestTrustGateFlag(t *testing.T) {
	for _, args := range [][]string{
		{"simulate", "--trust-gate", "maybe"},
		{"simulate", "--error-grid", "--grid-family", "calibration", "--trust-gate", "off,on"},
	} {
		var out bytes.Buffer
		root := newRoot(&app{stdout: &out, stderr: &out})
		root.SetArgs(append(args, "--out", "", "--log-level=error"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--trust-gate") || strings.Contains(out.String(), "eval set") {
			t.Fatalf("%v: error %v, want one naming --trust-gate before any work\n%s", args, err, out.String())
		}
	}
}
