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
		stdlibAgrees[CalibrationSnapshot](t, b, "calibration", SchemaCalibration)
	})
}

// Invalid UTF-8 in a string, raw or as a lone surrogate escape, becomes U+FFFD byte by byte as in
// encoding/json and the Python client (test_decode_null_optional_fields_and_lone_surrogate): the
// record is not refused.
func TestDecodeReplacesInvalidUTF8(t *testing.T) {
	enc, err := EncodeRollout(sampleRollout())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ prompt, want string }{
		{"a\xffb", "a\ufffdb"},
		{"\xe2\x9c", "\ufffd\ufffd"},
		{`\ud800x`, "\ufffdx"},
		{`\udc00\ud800`, "\ufffd\ufffd"},
		{`\ud83d\ude00`, "\U0001F600"},
	}
	for _, tt := range tests {
		b := bytes.Replace(enc, []byte(`"fit the <data> & report"`), []byte(`"`+tt.prompt+`"`), 1)
		r, err := DecodeRollout(b)
		if err != nil || r.Prompt != tt.want {
			t.Errorf("prompt %q: got %q, %v; want %q", tt.prompt, r.Prompt, err, tt.want)
		}
		stdlibAgrees[Rollout](t, b, "rollout", SchemaRollout)
	}
	b := bytes.Replace(enc, []byte(`"task":"t17"`), []byte("\"t\xffk\":\"t17\""), 1)
	if r, err := DecodeRollout(b); err != nil || r.Meta["t\ufffdk"] != "t17" {
		t.Errorf("meta key with invalid UTF-8: %v, %v", r.Meta, err)
	}
}
