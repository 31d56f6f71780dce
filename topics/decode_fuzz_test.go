package topics

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// stdlibAgrees fails unless a record decodeJSON accepts as T decodes to the same value with
// encoding/json, the encoder's own package, and every error is classified.
func stdlibAgrees[T any](t *testing.T, b []byte, kind, want string) {
	t.Helper()
	var got, std T
	if err := decodeJSON(b, kind, want, &got); err != nil {
		if Reason(err) == "error" {
			t.Fatalf("%s %q: unclassified error %v", kind, b, err)
		}
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&std); err != nil {
		t.Fatalf("%s %q: accepted, but encoding/json refuses it: %v", kind, b, err)
	}
	if !reflect.DeepEqual(got, std) {
		t.Fatalf("%s %q: value\n%#v\nencoding/json\n%#v", kind, b, got, std)
	}
}

// FuzzDecodeJSONMatchesStdlib is the differential target of the JSON decoder (json v2 with the
// contract's strict options): whatever it accepts, encoding/json decodes to the same value.
func FuzzDecodeJSONMatchesStdlib(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		stdlibAgrees[Rollout](t, b, "rollout", SchemaRollout)
		stdlibAgrees[StepManifest](t, b, "step", SchemaStep)
		stdlibAgrees[PredictedReward](t, b, "predicted", SchemaPredicted)
		stdlibAgrees[ExecutedReward](t, b, "executed", SchemaExecuted)
		stdlibAgrees[CalibrationSnapshot](t, b, "calibration", oracleCalibrationSchema)
	})
}

// Invalid UTF-8 in a string, raw or as a lone surrogate escape, is refused naming the field
// (a key's fault names its object), as the Python client refuses it
// (test_decode_refuses_invalid_utf8): never rewritten to U+FFFD and processed.
func TestDecodeRefusesInvalidUTF8(t *testing.T) {
	enc, err := EncodeRollout(sampleRollout())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ old, new, reason string }{
		{`"fit the <data> & report"`, "\"a\xffb\"", "invalid-field:prompt"},
		{`"fit the <data> & report"`, "\"\xe2\x9c\"", "invalid-field:prompt"},
		{`"fit the <data> & report"`, `"\ud800x"`, "invalid-field:prompt"},
		{`"fit the <data> & report"`, `"\udc00\ud800"`, "invalid-field:prompt"},
		{`"task":"t17"`, "\"task\":\"t\xff17\"", "invalid-field:meta.task"},
		{`"task":"t17"`, `"task":"t\ud80017"`, "invalid-field:meta.task"},
		{`"task":"t17"`, "\"t\xffk\":\"t17\"", "invalid-field:meta.t\ufffdk"},
		{`"step":3`, "\"s\xfftep\":3", "invalid-field:s\ufffdtep"},
		{`"policy_version":"ckpt-3"`, "\"policy_version\":\"ckpt\xc0\xaf3\"", "invalid-field:policy_version"},
		{`"fit the <data> & report"`, `"\ud83d\ude00"`, ""}, // a valid pair is a valid rune
	}
	for _, tt := range tests {
		b := bytes.Replace(enc, []byte(tt.old), []byte(tt.new), 1)
		_, err := DecodeRollout(b)
		if got := Reason(err); got != tt.reason {
			t.Errorf("%q: Reason %q (%v), want %q", tt.new, got, err, tt.reason)
		}
		stdlibAgrees[Rollout](t, b, "rollout", SchemaRollout)
	}
}
