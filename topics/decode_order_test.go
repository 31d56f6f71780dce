package topics

import (
	"strings"
	"testing"
)

// TestDecodeFaultOrder pins which fault a record with several reports (decodeJSON's rules 2-4):
// syntax before schema before members; among members the first structural fault (unknown,
// duplicate, wrong JSON type) in document order, and a string's content (an RFC 3339 time,
// base64) only when no member has a structural fault, then the first such in document order.
// Python's _json.py reports the same on every case (the last one is new: encoding/json reported
// created_at there, Python state).
func TestDecodeFaultOrder(t *testing.T) {
	c, err := calibrationJSON(sampleCalibration())
	if err != nil {
		t.Fatal(err)
	}
	p, err := EncodePredicted(samplePredicted())
	if err != nil {
		t.Fatal(err)
	}
	rep := func(b []byte, pairs ...string) []byte {
		return []byte(strings.NewReplacer(pairs...).Replace(string(b)))
	}
	tests := []struct {
		name string
		in   []byte
		dec  func([]byte) error
		want string
	}{
		{"syntax after a bad schema", rep(p, `"wmrl.reward.predicted.v1"`, `"v9"`, `}`, ``), decPredicted, "malformed-json"},
		{"schema after an unknown field", rep(p, `"run_id"`, `"runid"`, `"wmrl.reward.predicted.v1"`, `"v9"`), decPredicted, "unknown-schema"},
		{"first of two structural faults", rep(p, `"run_id"`, `"runid"`, `"status":"ok"`, `"status":1`), decPredicted, "invalid-field:runid"},
		{"wrong type after a bad time", rep(p, `"step":3`, `"step":"x"`, `"2026-03-01T12:00:00Z"`, `"yesterday"`), decPredicted, "invalid-field:step"},
		{"unknown field after bad base64", rep(c, `"AAEC+vs="`, `"!!"`, `"bias_after"`, `"bias_aft"`), decCalibration, "invalid-field:bias_aft"},
		{"null after bad base64", rep(c, `"AAEC+vs="`, `"!!"`, `"anchor_weight":1.75`, `"anchor_weight":null`), decCalibration, "invalid-field:anchor_weight"},
		{"bad base64 alone", rep(c, `"AAEC+vs="`, `"!!"`), decCalibration, "invalid-field:state"},
		{"bad base64 before a bad time", rep(c, `"AAEC+vs="`, `"!!"`, `"2026-03-01T12:00:00Z"`, `"yesterday"`), decCalibration, "invalid-field:state"},
	}
	for _, tt := range tests {
		if got := Reason(tt.dec(tt.in)); got != tt.want {
			t.Errorf("%s: Reason %q, want %q\n%s", tt.name, got, tt.want, tt.in)
		}
	}
}

func decPredicted(b []byte) error   { _, err := DecodePredicted(b); return err }
func decCalibration(b []byte) error { return decodeCalibrationJSON(b) }
