package topics

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-json/jsontext"
	jsonv2 "github.com/goccy/go-json/v2"
)

// MaxRecordBytes bounds an encoded JSON record. It sits at Kafka's default message limit, so a
// record that encodes also produces; bigger payloads must go by reference (Rollout.ArtifactURI).
const MaxRecordBytes = 1 << 20

// maxJSONDepth bounds JSON nesting; no record nests deeper than 3, so anything deep is hostile.
const maxJSONDepth = 16

// validator is implemented by every record type.
type validator interface{ Validate() error }

// EncodeRollout validates r and marshals it as JSON. An empty Schema is set to SchemaRollout;
// any other schema is refused, because the type alone decides the wire schema.
func EncodeRollout(r Rollout) ([]byte, error) {
	r.Schema = cmp.Or(r.Schema, SchemaRollout)
	return encodeJSON(&r)
}

// EncodeStep validates m and marshals it as JSON (empty Schema → SchemaStep).
func EncodeStep(m StepManifest) ([]byte, error) {
	m.Schema = cmp.Or(m.Schema, SchemaStep)
	return encodeJSON(&m)
}

// EncodePredicted validates p and marshals it as JSON (empty Schema → SchemaPredicted).
func EncodePredicted(p PredictedReward) ([]byte, error) {
	p.Schema = cmp.Or(p.Schema, SchemaPredicted)
	return encodeJSON(&p)
}

// EncodeExecuted validates e and marshals it as JSON (empty Schema → SchemaExecuted).
func EncodeExecuted(e ExecutedReward) ([]byte, error) {
	e.Schema = cmp.Or(e.Schema, SchemaExecuted)
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

// DecodePredicted strictly decodes and validates a world-model reward.
func DecodePredicted(b []byte) (PredictedReward, error) {
	var p PredictedReward
	if err := decodeJSON(b, "predicted", SchemaPredicted, &p); err != nil {
		return PredictedReward{}, err
	}
	if err := p.Validate(); err != nil {
		return PredictedReward{}, err
	}
	return p, nil
}

// DecodeExecuted strictly decodes and validates a sandbox reward.
func DecodeExecuted(b []byte) (ExecutedReward, error) {
	var e ExecutedReward
	if err := decodeJSON(b, "executed", SchemaExecuted, &e); err != nil {
		return ExecutedReward{}, err
	}
	if err := e.Validate(); err != nil {
		return ExecutedReward{}, err
	}
	return e, nil
}

// DecodeCalibration strictly decodes and validates a calibration snapshot (SchemaCalibration's
// binary layout; any other is refused as an unknown schema).
func DecodeCalibration(b []byte) (CalibrationSnapshot, error) {
	s, err := decodeCalibrationBinary(b)
	if err != nil {
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

// decodeJSON decodes one JSON record strictly into v, a pointer to a zero record. The rules, and
// the order in which a record that breaks several is reported:
//
//  1. len(b) > MaxRecordBytes → ErrTooLarge, before any parsing;
//  2. exactly one JSON object, nested at most maxJSONDepth deep → else malformed JSON;
//  3. the top-level `schema` is the string want → else ErrUnknownSchema; it comes before field
//     names so that a newer schema version reports unknown-schema, not an unknown field;
//  4. the first member, in document order, that is unknown (names match exactly: encoding/json
//     alone would accept `RUN_ID` for `run_id`, a Python reader would not), duplicate (parsers
//     resolve duplicates differently), or of the wrong JSON type (null for a required field, a
//     fraction or an out-of-range number for an integer, a time that is not RFC 3339, bad
//     base64) → *FieldError with its path, `groups[2].size`.
//
// A valid record takes a single json v2 decode (strictJSON); everything after it is the error
// path, which re-reads the bytes to order the faults as above. Validation is left to the caller.
func decodeJSON[T any](b []byte, kind, want string, v *T) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%s record: %d bytes exceeds the %d byte limit: %w", kind, len(b), MaxRecordBytes, ErrTooLarge)
	}
	opts := strictJSON
	if bytes.Contains(b, []byte("null")) {
		opts = strictNullJSON
	}
	err := jsonv2.UnmarshalOf(b, v, opts)
	if err == nil && schemaOf(v) == want {
		return nil
	}
	if serr := scanJSON(b, kind, want); serr != nil {
		return serr
	}
	if err == nil { // scanJSON found the schema right where Unmarshal read a different one
		return &FieldError{Record: kind, Field: "schema", Reason: fmt.Sprintf("want %q", want), Err: ErrUnknownSchema}
	}
	t := reflect.TypeFor[T]()
	if contentError(err) {
		// A structural fault later in the document comes first (rule 4): look for one with
		// every string accepted as a time and as base64.
		if serr := jsonv2.Unmarshal(b, reflect.New(t).Interface(), anyContentJSON); serr != nil {
			err = serr
		}
	}
	return memberError(b, kind, t, err)
}

var (
	// strictJSON are the options of every record's decode. json v2 already matches member names
	// case-sensitively, refuses duplicate names and refuses invalid UTF-8 in a string (raw bytes or
	// a lone surrogate escape); it is told to refuse unknown members too. Invalid UTF-8 is refused,
	// not rewritten to U+FFFD: a rewritten meta value would be executed as text nobody sent, so
	// the record is dead-lettered naming the field (`meta.task`), as the Python client does
	// (python/src/wmrl_client/_json.py).
	strictJSON = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true))
	// strictNullJSON adds the one rule json v2 lacks, null only for optional (pointer, slice,
	// map) fields: v2 reads null as the zero value of any type. The check costs a call per
	// value, so only records that contain "null" at all take it.
	strictNullJSON = jsonv2.JoinOptions(strictJSON, jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(rejectNull)))
)

// anyContentJSON is strictNullJSON with any string accepted as a time.Time or a []byte.
var anyContentJSON = jsonv2.JoinOptions(strictJSON, jsonv2.WithUnmarshalers(jsonv2.JoinUnmarshalers(
	jsonv2.UnmarshalFromFunc(rejectNull),
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *time.Time) error { return skipString(dec) }),
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *[]byte) error { return skipString(dec) }),
)))

func skipString(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '"' {
		return errors.ErrUnsupported
	}
	return dec.SkipValue()
}

// contentError reports whether err is about a string's content: not an RFC 3339 time, not
// base64.
func contentError(err error) bool {
	var sem *jsonv2.SemanticError
	var pe *time.ParseError
	return errors.As(err, &sem) && sem.JSONKind == '"' &&
		(errors.As(sem.Err, &pe) || sem.GoType == reflect.TypeFor[[]byte]() || sem.GoType == reflect.TypeFor[time.Time]())
}

// nullError is rejectNull's error: null for a value of a type that has no null.
type nullError struct{ t reflect.Type }

func (e *nullError) Error() string { return "null for " + e.t.String() }

func rejectNull(dec *jsontext.Decoder, v any) error {
	if dec.PeekKind() == 'n' {
		switch t := reflect.TypeOf(v).Elem(); t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
		default:
			return &nullError{t}
		}
	}
	return errors.ErrUnsupported
}

// schemaOf is the decoded schema of a record decodeJSON fills.
func schemaOf(v any) string {
	switch r := v.(type) {
	case *Rollout:
		return r.Schema
	case *StepManifest:
		return r.Schema
	case *PredictedReward:
		return r.Schema
	case *ExecutedReward:
		return r.Schema
	case *CalibrationSnapshot:
		return r.Schema
	}
	return ""
}

// scanJSON is the error path's token pass: the syntax of the whole document and its depth, then
// the top-level schema (rules 2 and 3 of decodeJSON). It reports nil if both hold.
func scanJSON(b []byte, kind, want string) error {
	bad := func(format string, args ...any) error {
		return malformed("json", fmt.Errorf("%s record: "+format, append([]any{kind}, args...)...))
	}
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	tok, err := dec.ReadToken()
	if err != nil {
		return bad("%w", unexpectedEOF(err))
	}
	if tok.Kind() != '{' {
		return bad("want a JSON object, got %s", kindName(tok.Kind()))
	}
	var schema *string
	var schemaErr error
	for dec.StackDepth() > 0 {
		if tok, err = dec.ReadToken(); err != nil {
			return bad("%w", unexpectedEOF(err))
		}
		if depth := dec.StackDepth(); depth > maxJSONDepth {
			return bad("nesting deeper than %d at %s", maxJSONDepth, dec.StackPointer())
		}
		if dec.StackDepth() != 1 || tok.Kind() != '"' || tok.String() != "schema" {
			continue
		}
		if _, n := dec.StackIndex(1); n%2 != 1 {
			continue // a value, not a member name
		}
		if k := dec.PeekKind(); k != '"' {
			if schemaErr == nil {
				schemaErr = &FieldError{Record: kind, Field: "schema", Reason: "wrong type: got " + kindName(k) + ", want string", Err: ErrUnknownSchema}
			}
			continue
		}
		if tok, err = dec.ReadToken(); err != nil {
			return bad("%w", unexpectedEOF(err))
		}
		s := tok.String()
		schema = &s
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return bad("data after the JSON object")
	}
	switch {
	case schemaErr != nil:
		return schemaErr
	case schema == nil:
		return &FieldError{Record: kind, Field: "schema", Reason: fmt.Sprintf("required (want %q)", want), Err: ErrUnknownSchema}
	case *schema != want:
		return &FieldError{Record: kind, Field: "schema", Value: *schema, Reason: fmt.Sprintf("want %q", want), Err: ErrUnknownSchema}
	}
	return nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// memberError maps the error of a decode into t, of a document scanJSON accepts, to the
// *FieldError of rule 4.
func memberError(b []byte, kind string, t reflect.Type, err error) error {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		return &FieldError{Record: kind, Field: fieldPath(t, syn.JSONPointer), Reason: "duplicate key"}
	case errors.As(err, &syn):
		// scanJSON passed the syntax with invalid UTF-8 allowed, so this is a string's UTF-8: raw
		// bytes or a surrogate escape (jsontext has no sentinel for the latter). The pointer names
		// the member whose value it is, or the object whose key it is.
		path := fieldPath(t, syn.JSONPointer)
		if key, ok := nameAt(b, syn.ByteOffset); ok {
			return &FieldError{Record: kind, Field: strings.TrimPrefix(path+"."+key, "."), Reason: "key not valid UTF-8", Err: ErrMalformed}
		}
		return &FieldError{Record: kind, Field: path, Reason: "not valid UTF-8", Err: ErrMalformed}
	case !errors.As(err, &sem):
		return malformed("json", fmt.Errorf("%s record: %w", kind, err))
	}
	path := fieldPath(t, sem.JSONPointer)
	var pe *time.ParseError
	var ne *nullError
	switch {
	case errors.Is(sem.Err, jsonv2.ErrUnknownName):
		return &FieldError{Record: kind, Field: path, Reason: "unknown field"}
	case errors.As(sem.Err, &ne):
		return &FieldError{Record: kind, Field: path, Reason: "wrong type: got null, want " + jsonTypeName(ne.t), Err: ErrMalformed}
	case errors.As(sem.Err, &pe):
		return &FieldError{Record: kind, Field: path, Value: pe.Value, Reason: "not an RFC 3339 time", Err: ErrMalformed}
	case sem.JSONKind == '"' && sem.GoType == reflect.TypeFor[[]byte]():
		return &FieldError{Record: kind, Field: path, Reason: fmt.Sprintf("not valid base64: %v", sem.Err), Err: ErrMalformed}
	case sem.GoType != nil:
		return &FieldError{Record: kind, Field: path, Reason: fmt.Sprintf("wrong type: got %s, want %s", kindName(sem.JSONKind), jsonTypeName(sem.GoType)), Err: ErrMalformed}
	}
	return malformed("json", fmt.Errorf("%s record: %w", kind, err))
}

// nameAt reports the member name (invalid UTF-8 shown as U+FFFD) whose string token holds byte
// off of b, a document scanJSON accepts; ok is false when that token is a value.
func nameAt(b []byte, off int64) (name string, ok bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		if dec.InputOffset() <= off {
			continue
		}
		kind, n := dec.StackIndex(dec.StackDepth())
		return tok.String(), tok.Kind() == '"' && kind == '{' && n%2 == 1
	}
}

// fieldPath turns the JSON pointer of a member of t (`/groups/2/size`) into the field path of a
// FieldError (`groups[2].size`): array elements are indexed, object members joined by dots.
func fieldPath(t reflect.Type, p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t != nil && t.Kind() == reflect.Slice {
			b.WriteString("[" + tok + "]")
			t = t.Elem()
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			t = memberType(t, tok)
		default:
			t = nil
		}
	}
	return b.String()
}

// memberType is the type of the field of struct t whose JSON name is name, or nil.
func memberType(t reflect.Type, name string) reflect.Type {
	for _, f := range reflect.VisibleFields(t) { // with the fields of embedded structs (RolloutRef)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name && f.IsExported() && !f.Anonymous {
			return f.Type
		}
	}
	return nil
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

// kindName names a JSON kind in errors.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "end of input"
}
