package topics

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wmrl/wmrl/topics/internal/jsonscan"
)

// MaxRecordBytes bounds an encoded JSON record. It sits at Kafka's default message limit, so a
// record that encodes also produces; bigger payloads must go by reference (Rollout.ArtifactURI).
const MaxRecordBytes = 1 << 20

// maxJSONDepth bounds JSON nesting; no record nests deeper than 3, so anything deep is hostile.
const maxJSONDepth = jsonscan.MaxDepth

// validator is implemented by every record type.
type validator interface{ Validate() error }

// EncodeRollout validates r and marshals it as JSON. An empty Schema is set to SchemaRollout;
// any other schema is refused, because the type alone decides the wire schema.
func EncodeRollout(r Rollout) ([]byte, error) {
	if r.Schema == "" {
		r.Schema = SchemaRollout
	}
	return encodeJSON(&r)
}

// EncodeStep validates m and marshals it as JSON (empty Schema → SchemaStep).
func EncodeStep(m StepManifest) ([]byte, error) {
	if m.Schema == "" {
		m.Schema = SchemaStep
	}
	return encodeJSON(&m)
}

// EncodePredicted validates p and marshals it as JSON (empty Schema → SchemaPredicted).
func EncodePredicted(p PredictedReward) ([]byte, error) {
	if p.Schema == "" {
		p.Schema = SchemaPredicted
	}
	return encodeJSON(&p)
}

// EncodeExecuted validates e and marshals it as JSON (empty Schema → SchemaExecuted).
func EncodeExecuted(e ExecutedReward) ([]byte, error) {
	if e.Schema == "" {
		e.Schema = SchemaExecuted
	}
	return encodeJSON(&e)
}

// encodeJSON writes compact JSON without HTML escaping (prompts and artifacts are code, and
// `\u003c` helps nobody); the bytes are deterministic for equal input.
func encodeJSON(v validator) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("encode %T: %d bytes exceeds the %d byte record limit: %w", v, len(b), MaxRecordBytes, ErrTooLarge)
	}
	return b, nil
}

// DecodeRollout strictly decodes and validates a rollout record. See decodeJSON for the rules.
func DecodeRollout(b []byte) (Rollout, error) {
	var r Rollout
	if err := decodeJSON(b, "rollout", SchemaRollout, &r); err != nil {
		return Rollout{}, err
	}
	if len(r.Meta) == 0 {
		r.Meta = nil
	}
	if err := r.Validate(); err != nil {
		return Rollout{}, err
	}
	return r, nil
}

// DecodeStep strictly decodes and validates a step manifest.
func DecodeStep(b []byte) (StepManifest, error) {
	var m StepManifest
	if err := decodeJSON(b, "step", SchemaStep, &m); err != nil {
		return StepManifest{}, err
	}
	if err := m.Validate(); err != nil {
		return StepManifest{}, err
	}
	return m, nil
}

// Pools of the values the reward decoders fill: decodeJSON takes them as `any`, so a local would
// be a heap allocation per record.
var (
	predictedPool = sync.Pool{New: func() any { return new(PredictedReward) }}
	executedPool  = sync.Pool{New: func() any { return new(ExecutedReward) }}
)

// decodePooled is decodeJSON into a zeroed value from pool, returned by value.
func decodePooled[T any](pool *sync.Pool, b []byte, kind, want string) (T, error) {
	p := pool.Get().(*T)
	err := decodeJSON(b, kind, want, p)
	v := *p
	var zero T
	*p = zero
	pool.Put(p)
	return v, err
}

// DecodePredicted strictly decodes and validates a world-model reward.
func DecodePredicted(b []byte) (PredictedReward, error) {
	p, err := decodePooled[PredictedReward](&predictedPool, b, "predicted", SchemaPredicted)
	if err != nil {
		return PredictedReward{}, err
	}
	if err := p.Validate(); err != nil {
		return PredictedReward{}, err
	}
	return p, nil
}

// DecodeExecuted strictly decodes and validates a sandbox reward.
func DecodeExecuted(b []byte) (ExecutedReward, error) {
	e, err := decodePooled[ExecutedReward](&executedPool, b, "executed", SchemaExecuted)
	if err != nil {
		return ExecutedReward{}, err
	}
	if err := e.Validate(); err != nil {
		return ExecutedReward{}, err
	}
	return e, nil
}

// DecodeCalibration strictly decodes and validates a calibration snapshot: binary (v2, by its
// magic) or JSON (v1).
func DecodeCalibration(b []byte) (CalibrationSnapshot, error) {
	var s CalibrationSnapshot
	if isBinaryCalibration(b) {
		var err error
		if s, err = decodeCalibrationBinary(b); err != nil {
			return CalibrationSnapshot{}, err
		}
	} else if err := decodeJSON(b, "calibration", SchemaCalibration, &s); err != nil {
		return CalibrationSnapshot{}, err
	}
	if len(s.BreakX) == 0 {
		s.BreakX = nil
	}
	if len(s.BreakY) == 0 {
		s.BreakY = nil
	}
	if len(s.State) == 0 {
		s.State = nil
	}
	if err := s.Validate(); err != nil {
		return CalibrationSnapshot{}, err
	}
	return s, nil
}

// DecodeAny decodes b as the record named by schema (the wmrl-schema header) and returns the
// value: Rollout, StepManifest, PredictedReward, ExecutedReward, CalibrationSnapshot, or
// []AdvantageRow for SchemaAdvantages and SchemaAdvantagesV2. It serves tooling (DLQ inspection, replay) that handles
// every topic.
func DecodeAny(schema string, b []byte) (any, error) {
	switch schema {
	case SchemaRollout:
		return DecodeRollout(b)
	case SchemaStep:
		return DecodeStep(b)
	case SchemaPredicted:
		return DecodePredicted(b)
	case SchemaExecuted:
		return DecodeExecuted(b)
	case SchemaCalibration, SchemaCalibrationV2:
		return DecodeCalibration(b)
	case SchemaAdvantages, SchemaAdvantagesV2:
		return DecodeAdvantages(b)
	default:
		return nil, &FieldError{Field: HeaderSchema, Value: schema, Reason: "no decoder for this schema", Err: ErrUnknownSchema}
	}
}

// decodeJSON decodes one JSON record strictly with the rules of decodeJSONSlow. Valid records take
// decodeFast, a single pass over the bytes that allocates only the decoded values; anything it
// does not accept (every invalid record, and rare valid forms such as escaped keys) is decoded
// again by decodeJSONSlow, so every error and every accepted value is the one the slow path gives.
func decodeJSON(b []byte, kind, want string, v any) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%s record: %d bytes exceeds the %d byte limit: %w", kind, len(b), MaxRecordBytes, ErrTooLarge)
	}
	if jsonscan.Decode(b, want, v) {
		return nil
	}
	return decodeJSONSlow(b, kind, want, v)
}

// decodeJSONSlow decodes one JSON record strictly, in this order:
//
//  1. len(b) > MaxRecordBytes → ErrTooLarge, before any parsing;
//  2. a token scan: exactly one JSON object, nesting ≤ maxJSONDepth, and the top-level `schema`
//     must be the string want (else ErrUnknownSchema). The schema is checked before field names
//     so that a newer schema version reports unknown-schema, not an unknown field;
//  3. field names must match exactly (encoding/json alone would accept `RUN_ID` for `run_id`,
//     which a Python reader would not), with no duplicate keys (which parsers resolve
//     differently) → *FieldError; a value of the wrong JSON type (including null for a required
//     field, a fraction or out-of-range number for an integer) → *FieldError wrapping
//     ErrMalformed. Paths index arrays: `groups[2].size`;
//  4. encoding/json with DisallowUnknownFields does the actual decoding (its errors are mapped
//     to *FieldError too, as a backstop).
//
// Validation is left to the caller. v must point to a zero value.
func decodeJSONSlow(b []byte, kind, want string, v any) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%s record: %d bytes exceeds the %d byte limit: %w", kind, len(b), MaxRecordBytes, ErrTooLarge)
	}
	sc := jsonScan{dec: json.NewDecoder(bytes.NewReader(b)), kind: kind}
	sc.dec.UseNumber()
	if err := sc.document(reflect.TypeOf(v).Elem()); err != nil {
		return err
	}
	switch {
	case sc.schemaErr != nil:
		return sc.schemaErr
	case sc.schema == nil:
		return &FieldError{Record: kind, Field: "schema", Reason: fmt.Sprintf("required (want %q)", want), Err: ErrUnknownSchema}
	case *sc.schema != want:
		return &FieldError{Record: kind, Field: "schema", Value: *sc.schema, Reason: fmt.Sprintf("want %q", want), Err: ErrUnknownSchema}
	case sc.keyErr != nil:
		return sc.keyErr
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(kind, err)
	}
	return nil
}

// decodeError maps encoding/json's errors to errors that name the field.
func decodeError(kind string, err error) error {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	var ce base64.CorruptInputError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return &FieldError{Record: kind, Field: te.Field, Reason: fmt.Sprintf("wrong type: got %s, want %s", te.Value, jsonTypeName(te.Type)), Err: ErrMalformed}
	case errors.As(err, &pe):
		// created_at is the only time field of every record.
		return &FieldError{Record: kind, Field: "created_at", Value: pe.Value, Reason: "not an RFC 3339 time", Err: ErrMalformed}
	case strings.HasPrefix(err.Error(), "Time.UnmarshalJSON"):
		return &FieldError{Record: kind, Field: "created_at", Reason: "wrong type: want an RFC 3339 time string", Err: ErrMalformed}
	case errors.As(err, &ce):
		// state is the only []byte field of every record.
		return &FieldError{Record: kind, Field: "state", Reason: "not valid base64: " + ce.Error(), Err: ErrMalformed}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &FieldError{Record: kind, Field: name, Reason: "unknown field"}
	default:
		return malformed("json", fmt.Errorf("%s record: %w", kind, err))
	}
}

func jsonTypeName(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return "RFC 3339 time string"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer in range of " + t.Kind().String()
	case reflect.Float32, reflect.Float64:
		return "finite number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64 string"
		}
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	default:
		return t.String()
	}
}

// jsonScan walks a document's tokens against a Go type to enforce the rules encoding/json does
// not: exact key names, no duplicate keys, one value, bounded depth.
type jsonScan struct {
	dec       *json.Decoder
	kind      string
	schema    *string
	schemaErr error
	keyErr    error
}

func (s *jsonScan) token() (json.Token, error) {
	tok, err := s.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, malformed("json", fmt.Errorf("%s record: %w", s.kind, err))
	}
	return tok, nil
}

func (s *jsonScan) document(t reflect.Type) error {
	tok, err := s.token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return malformed("json", fmt.Errorf("%s record: want a JSON object, got %s", s.kind, describeToken(tok)))
	}
	if err := s.object(t, "", 1, true); err != nil {
		return err
	}
	if _, err := s.dec.Token(); !errors.Is(err, io.EOF) {
		return malformed("json", fmt.Errorf("%s record: data after the JSON object", s.kind))
	}
	return nil
}

func (s *jsonScan) keyFail(path, reason string) {
	if s.keyErr == nil {
		s.keyErr = &FieldError{Record: s.kind, Field: path, Reason: reason}
	}
}

// value scans the value starting at tok; t is its Go type, or nil when unconstrained.
func (s *jsonScan) value(tok json.Token, t reflect.Type, path string, depth int) error {
	if t != nil && !tokenFits(tok, t) {
		if s.keyErr == nil {
			s.keyErr = &FieldError{Record: s.kind, Field: path, Reason: fmt.Sprintf("wrong type: got %s, want %s", describeToken(tok), jsonTypeName(t)), Err: ErrMalformed}
		}
		t = nil // keep scanning for syntax errors, unconstrained
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth > maxJSONDepth {
		return malformed("json", fmt.Errorf("%s record: nesting deeper than %d at %s", s.kind, maxJSONDepth, path))
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch d {
	case '{':
		return s.object(t, path, depth, false)
	case '[':
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 {
			elem = t.Elem()
		}
		for i := 0; s.dec.More(); i++ {
			tok, err := s.token()
			if err != nil {
				return err
			}
			if err := s.value(tok, elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		_, err := s.token()
		return err
	}
	return nil
}

// object scans an object whose '{' was consumed.
func (s *jsonScan) object(t reflect.Type, path string, depth int, top bool) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch {
		case t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]():
			fields = jsonFields(t)
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		}
	}
	seen := make(map[string]struct{})
	for s.dec.More() {
		tok, err := s.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // Token guarantees object keys are strings.
		kpath := key
		if path != "" {
			kpath = path + "." + key
		}
		if _, dup := seen[key]; dup {
			s.keyFail(kpath, "duplicate key")
		}
		seen[key] = struct{}{}
		ft := elem
		if fields != nil {
			var known bool
			if ft, known = fields[key]; !known {
				s.keyFail(kpath, "unknown field")
			}
		}
		tok, err = s.token()
		if err != nil {
			return err
		}
		if top && key == "schema" {
			if str, ok := tok.(string); ok {
				s.schema = &str
			} else if s.schemaErr == nil {
				s.schemaErr = &FieldError{Record: s.kind, Field: "schema", Reason: "wrong type: got " + describeToken(tok) + ", want string", Err: ErrUnknownSchema}
			}
		}
		if err := s.value(tok, ft, kpath, depth+1); err != nil {
			return err
		}
	}
	_, err := s.token()
	return err
}

// tokenFits reports whether the JSON value starting at tok can decode into t without loss, with
// the rules a Python reader applies too: null only for optional (pointer, slice, map) fields,
// integers only for integer fields and within range, finite numbers for floats.
func tokenFits(tok json.Token, t reflect.Type) bool {
	isTime := t == reflect.TypeFor[time.Time]()
	isBytes := t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
	switch x := tok.(type) {
	case nil:
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			return true
		}
		return false
	case string:
		return t.Kind() == reflect.String || isTime || isBytes
	case bool:
		return t.Kind() == reflect.Bool
	case json.Number:
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			_, err := strconv.ParseInt(string(x), 10, t.Bits())
			return err == nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			_, err := strconv.ParseUint(string(x), 10, t.Bits())
			return err == nil
		case reflect.Float32, reflect.Float64:
			_, err := strconv.ParseFloat(string(x), t.Bits())
			return err == nil
		}
		return false
	case json.Delim:
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if x == '{' {
			return (t.Kind() == reflect.Struct && !isTime) || t.Kind() == reflect.Map
		}
		return t.Kind() == reflect.Slice && !isBytes
	}
	return false
}

func describeToken(tok json.Token) string {
	switch x := tok.(type) {
	case json.Delim:
		if x == '{' {
			return "object"
		}
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", tok)
	}
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps a struct's JSON names to field types, following encoding/json's tag rules for
// the plain (non-embedded) fields our records use.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
