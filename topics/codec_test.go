package topics

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestJSONRoundTrip(t *testing.T) {
	check := func(name string, enc func() ([]byte, error), dec func([]byte) (any, error), want any) {
		t.Run(name, func(t *testing.T) {
			b, err := enc()
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec(b)
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
			}
		})
	}
	r, s, p, e, i, c := sampleRollout(), sampleStep(), samplePredicted(), sampleExecuted(), sampleImputed(), sampleCalibration()
	check("rollout", func() ([]byte, error) { return EncodeRollout(r) }, func(b []byte) (any, error) { return DecodeRollout(b) }, r)
	check("step", func() ([]byte, error) { return EncodeStep(s) }, func(b []byte) (any, error) { return DecodeStep(b) }, s)
	check("predicted", func() ([]byte, error) { return EncodePredicted(p) }, func(b []byte) (any, error) { return DecodePredicted(b) }, p)
	check("executed", func() ([]byte, error) { return EncodeExecuted(e) }, func(b []byte) (any, error) { return DecodeExecuted(b) }, e)
	check("imputed", func() ([]byte, error) { return EncodeExecuted(i) }, func(b []byte) (any, error) { return DecodeExecuted(b) }, i)
	check("calibration", func() ([]byte, error) { return EncodeCalibration(c) }, func(b []byte) (any, error) { return DecodeCalibration(b) }, c)
}

func TestEncodeFillsSchema(t *testing.T) {
	r := sampleRollout()
	r.Schema = ""
	b, err := EncodeRollout(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"schema":"wmrl.rollout.v1",`)) {
		t.Errorf("schema not stamped: %s", b)
	}
	r.Schema = SchemaPredicted
	if _, err := EncodeRollout(r); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("foreign schema accepted: %v", err)
	}
	if !bytes.Contains(b, []byte("<data> & report")) {
		t.Errorf("HTML escaped: %s", b)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	p := samplePredicted()
	p.Score = ptr(1.5)
	if _, err := EncodePredicted(p); Reason(err) != "invalid-field:score" {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeStrict(t *testing.T) {
	valid, err := EncodePredicted(samplePredicted())
	if err != nil {
		t.Fatal(err)
	}
	v := string(valid)
	tests := []struct {
		name   string
		in     string
		reason string
		sent   error
	}{
		{"valid", v, "", nil},
		{"trailing whitespace", v + "\n\t ", "", nil},
		{"syntax", v[:len(v)-1], "malformed-json", ErrMalformed},
		{"not an object", `[1,2]`, "malformed-json", ErrMalformed},
		{"null", `null`, "malformed-json", ErrMalformed},
		{"two values", v + v, "malformed-json", ErrMalformed},
		{"garbage after", v + "x", "malformed-json", ErrMalformed},
		{"empty", ``, "malformed-json", ErrMalformed},
		{"missing schema", strings.Replace(v, `"schema":"wmrl.reward.predicted.v1",`, "", 1), "unknown-schema", ErrUnknownSchema},
		{"unknown schema", strings.Replace(v, `predicted.v1`, `predicted.v2`, 1), "unknown-schema", ErrUnknownSchema},
		{"schema of another type", strings.Replace(v, `wmrl.reward.predicted.v1`, SchemaExecuted, 1), "unknown-schema", ErrUnknownSchema},
		{"schema wrong type", strings.Replace(v, `"wmrl.reward.predicted.v1"`, `1`, 1), "unknown-schema", ErrUnknownSchema},
		{"newer schema with new field", strings.Replace(strings.Replace(v, `predicted.v1"`, `predicted.v2","extra":1`, 1), "", "", 1), "unknown-schema", ErrUnknownSchema},
		{"unknown field", strings.Replace(v, `"status"`, `"confidence":0.9,"status"`, 1), "invalid-field:confidence", ErrInvalid},
		{"case-folded field", strings.Replace(v, `"run_id"`, `"RUN_ID"`, 1), "invalid-field:RUN_ID", ErrInvalid},
		{"duplicate key", strings.Replace(v, `"status":"ok"`, `"status":"ok","status":"error"`, 1), "invalid-field:status", ErrInvalid},
		{"wrong type string for number", strings.Replace(v, `"step":3`, `"step":"3"`, 1), "invalid-field:step", ErrMalformed},
		{"fraction for integer", strings.Replace(v, `"step":3`, `"step":3.5`, 1), "invalid-field:step", ErrMalformed},
		{"overflow", strings.Replace(v, `"score":0.625`, `"score":1e999`, 1), "invalid-field:score", ErrMalformed},
		{"bool for string", strings.Replace(v, `"model":"wm-proxy"`, `"model":true`, 1), "invalid-field:model", ErrMalformed},
		{"bad time", strings.Replace(v, `"2026-03-01T12:00:00Z"`, `"yesterday"`, 1), "invalid-field:created_at", ErrMalformed},
		{"number time", strings.Replace(v, `"2026-03-01T12:00:00Z"`, `17`, 1), "invalid-field:created_at", ErrMalformed},
		{"score out of range", strings.Replace(v, `"score":0.625`, `"score":1.5`, 1), "invalid-field:score", ErrInvalid},
		{"null id", strings.Replace(v, `"run_id":"r1"`, `"run_id":null`, 1), "invalid-field:run_id", ErrMalformed},
		{"null score is absent", strings.Replace(v, `"score":0.625`, `"score":null`, 1), "invalid-field:score", ErrInvalid},
		{"deep nesting", strings.Replace(v, `"model":"wm-proxy"`, `"model":`+strings.Repeat("[", 40)+strings.Repeat("]", 40), 1), "malformed-json", ErrMalformed},
		{"too large", v + strings.Repeat(" ", MaxRecordBytes), "too-large", ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodePredicted([]byte(tt.in))
			if got := Reason(err); got != tt.reason {
				t.Fatalf("Reason = %q, want %q (err %v)", got, tt.reason, err)
			}
			if tt.sent != nil && !errors.Is(err, tt.sent) {
				t.Fatalf("%v does not wrap %v", err, tt.sent)
			}
		})
	}
}

func TestDecodeNestedFieldNames(t *testing.T) {
	b, err := EncodeStep(sampleStep())
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	tests := []struct{ in, field string }{
		{strings.Replace(s, `"size":4`, `"size":"4"`, 1), "groups[2].size"},
		{strings.Replace(s, `"size":4`, `"size":null`, 1), "groups[2].size"},
		{strings.Replace(s, `"size":4`, `"size":4.0`, 1), "groups[2].size"},
		{strings.Replace(s, `"groups":[`, `"groups":{"a":1},"x":[`, 1), "groups"},
		{strings.Replace(s, `"size":4`, `"size":4,"weight":2`, 1), "groups[2].weight"},
		{strings.Replace(s, `"size":4`, `"size":0`, 1), "groups[2].size"},
		{strings.Replace(s, `"group_id":"g5"`, `"group_id":"g5","group_id":"g6"`, 1), "groups[2].group_id"},
	}
	for _, tt := range tests {
		_, err := DecodeStep([]byte(tt.in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: got %v, want field %s", tt.in, err, tt.field)
		}
	}
	c, err := calibrationJSON(sampleCalibration())
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(c), `"state":"AAEC+vs="`, `"state":"!!"`, 1)
	if err := decodeCalibrationJSON([]byte(bad)); Reason(err) != "invalid-field:state" {
		t.Errorf("bad base64: %v (%s)", err, c)
	}
}

func TestDecodeCanonicalizesEmpty(t *testing.T) {
	r := sampleRollout()
	r.Meta = map[string]string{}
	b, _ := EncodeRollout(r)
	b = bytes.Replace(b, []byte(`"created_at"`), []byte(`"meta":{},"created_at"`), 1)
	got, err := DecodeRollout(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta != nil {
		t.Errorf("empty meta decoded as %#v, want nil", got.Meta)
	}
}

// decodeAny decodes b with the decoder of schema (the wmrl-schema header), for the tests that
// go over records of every topic.
func decodeAny(schema string, b []byte) (any, error) {
	switch schema {
	case SchemaRollout:
		return DecodeRollout(b)
	case SchemaStep:
		return DecodeStep(b)
	case SchemaPredicted:
		return DecodePredicted(b)
	case SchemaExecuted:
		return DecodeExecuted(b)
	case SchemaCalibration:
		return DecodeCalibration(b)
	case SchemaCalibrationEnd:
		return DecodeCalibrationEnd(b)
	case SchemaAdvantages, SchemaAdvantagesV2:
		return DecodeAdvantages(b)
	}
	return nil, &FieldError{Field: HeaderSchema, Value: schema, Reason: "no decoder for this schema", Err: ErrUnknownSchema}
}

// A record under another record's decoder is refused as unknown-schema.
func TestDecodeWrongSchema(t *testing.T) {
	b, _ := EncodeExecuted(sampleExecuted())
	if _, err := DecodePredicted(b); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("executed bytes under predicted schema: %v", err)
	}
}
