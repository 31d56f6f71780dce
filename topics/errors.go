package topics

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors. Stages branch on them (errors.Is) to decide between dead-lettering a record,
// alarming, or retrying; Reason turns them into the short machine code of the DLQ header.
var (
	// ErrInvalid marks a record that decoded but breaks a validation rule. Every *FieldError from
	// Validate wraps it.
	ErrInvalid = errors.New("invalid record")
	// ErrUnknownSchema marks a missing, mistyped or unknown schema identifier. Readers never guess
	// at the fields of a schema they do not know.
	ErrUnknownSchema = errors.New("unknown schema")
	// ErrTooLarge marks a payload (or an inline field) over its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrMalformed marks bytes that are not a well-formed encoding at all (bad JSON syntax, a
	// corrupt Arrow stream, a wrong JSON type for a field).
	ErrMalformed = errors.New("malformed payload")
	// ErrConflict marks records that contradict each other, e.g. two rows for one rollout in an
	// advantage batch, or rows whose run/step disagree with the batch they travel in.
	ErrConflict = errors.New("conflict")
	// ErrSchemaNotRegistered marks a Confluent-framed record whose schema id the registry does
	// not know (HTTP 404 from the registry, not an unreachable registry: that is retried).
	ErrSchemaNotRegistered = errors.New("schema id not registered")
	// ErrSchemaMismatch marks a Confluent-framed record whose schema id is registered, but under
	// another subject than its topic's (`<topic>-value`), or whose message index names no message
	// the topic carries.
	ErrSchemaMismatch = errors.New("schema is not the topic's")
)

// FieldError reports one bad field of one record. It names the record (type and ids as far as
// known), the JSON field path and the offending value, so a dead-lettered record can be fixed
// without a debugger. It unwraps to its cause: ErrInvalid, ErrMalformed (wrong JSON type),
// ErrUnknownSchema, ErrTooLarge or ErrConflict.
type FieldError struct {
	// Record names the record, e.g. `rollout run=r1 rollout=g3-r2`; empty when unknown.
	Record string
	// Field is the JSON path of the field, e.g. `score` or `groups[2].size`.
	Field string
	// Value is the offending value; nil means the field is missing or its value is not shown.
	Value any
	// Reason says what is wrong in a few words.
	Reason string
	// Err is the sentinel cause; nil means ErrInvalid.
	Err error
}

// maxShownValue bounds how much of a string value an error message repeats, so a 1 MiB artifact
// does not end up in a log line or a DLQ header.
const maxShownValue = 64

// Error formats as `<record>: field "<field>": value <value>: <reason>`.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Record != "" {
		b.WriteString(e.Record)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "field %q", e.Field)
	if e.Value != nil {
		b.WriteString(": value ")
		b.WriteString(showValue(e.Value))
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the sentinel cause so errors.Is(err, ErrInvalid) and friends work.
func (e *FieldError) Unwrap() error {
	if e.Err == nil {
		return ErrInvalid
	}
	return e.Err
}

func showValue(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > maxShownValue {
			cut := maxShownValue
			for cut > 0 && !utf8.RuneStart(x[cut]) {
				cut--
			}
			return fmt.Sprintf("%q… (%d bytes)", x[:cut], len(x))
		}
		return strconv.Quote(x)
	case Status:
		return showValue(string(x))
	case Source:
		return showValue(string(x))
	case float64:
		if math.IsNaN(x) {
			return "NaN"
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case *float64:
		if x == nil {
			return "null"
		}
		return showValue(*x)
	default:
		return fmt.Sprint(v)
	}
}

// malformedError tags a decoding failure with the wire format, so Reason can tell
// `malformed-json` from `malformed-arrow` while callers still branch on ErrMalformed.
type malformedError struct {
	format string
	err    error
}

func (e *malformedError) Error() string {
	return "malformed " + e.format + ": " + e.err.Error()
}

func (e *malformedError) Unwrap() error { return e.err }

func (e *malformedError) Is(target error) bool { return target == ErrMalformed }

func malformed(format string, err error) error {
	return &malformedError{format: format, err: err}
}

// Reason returns the short machine reason for err, used as the wmrl-dlq-reason header so DLQ
// tooling can group failures without parsing messages:
//
//	too-large             payload or inline field over its limit (ErrTooLarge)
//	unknown-schema        missing or unknown schema identifier (ErrUnknownSchema)
//	schema-unknown        a framed record's registry schema id is not registered (ErrSchemaNotRegistered)
//	schema-mismatch       a framed record's schema id is another subject's (ErrSchemaMismatch)
//	conflict              contradicting records (ErrConflict)
//	invalid-field:<path>  a *FieldError for field <path> (validation or wrong JSON type)
//	malformed-json        not parseable JSON (ErrMalformed from a JSON decoder)
//	malformed-arrow       not a parseable Arrow IPC stream (ErrMalformed from DecodeAdvantages)
//	malformed             ErrMalformed from elsewhere
//	invalid               ErrInvalid without a field
//	bad-header            a missing or unparseable header (ErrBadHeader)
//	error                 anything else (e.g. a downstream failure the stage gave up on)
//
// An error in the chain with a method DLQReason() string names its own reason (a stage's limits,
// e.g. the correction consumer's pending-steps-exceeded), checked first. Reason(nil) is "".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var fe *FieldError
	var me *malformedError
	var own interface{ DLQReason() string }
	switch {
	case errors.As(err, &own):
		return own.DLQReason()
	case errors.Is(err, ErrTooLarge):
		return "too-large"
	case errors.Is(err, ErrUnknownSchema):
		return "unknown-schema"
	case errors.Is(err, ErrSchemaNotRegistered):
		return "schema-unknown"
	case errors.Is(err, ErrSchemaMismatch):
		return "schema-mismatch"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.As(err, &fe):
		return "invalid-field:" + fe.Field
	case errors.As(err, &me):
		return "malformed-" + me.format
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrBadHeader):
		return "bad-header"
	default:
		return "error"
	}
}
