package topics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names. Consumers route and filter on headers without decoding values (the trainer skips
// other runs' chunks, DLQ tooling picks a decoder by wmrl-schema).
const (
	HeaderSchema      = "wmrl-schema"
	HeaderContentType = "content-type"
	HeaderRun         = "wmrl-run"
	HeaderStep        = "wmrl-step"
	HeaderStream      = "wmrl-stream"
	// HeaderChunk is "i/n": chunk i (0-based) of n for one step's advantage payloads.
	HeaderChunk = "wmrl-chunk"
	// HeaderRows is the number of rows in this advantage chunk.
	HeaderRows = "wmrl-rows"

	HeaderDLQReason          = "wmrl-dlq-reason"
	HeaderDLQError           = "wmrl-dlq-error"
	HeaderDLQTopic           = "wmrl-dlq-source-topic"
	HeaderDLQPartition       = "wmrl-dlq-source-partition"
	HeaderDLQOffset          = "wmrl-dlq-source-offset"
	HeaderDLQSourceTimestamp = "wmrl-dlq-source-timestamp"
	HeaderDLQStage           = "wmrl-dlq-stage"
	// HeaderDLQOmitted lists (comma-separated: key, value, headers) the parts of the source
	// record a dead letter left out because they were too large to deliver; see
	// DeadLetterWriter.Record.
	HeaderDLQOmitted = "wmrl-dlq-omitted"
	// HeaderDLQEndOffset, HeaderDLQLimitBytes and HeaderDLQCompressedBytes (when known) are on a
	// dead letter that references a whole record batch (reason batch-too-large, see
	// DeadLetterWriter.BatchRecord): the offset after the batch's last record, the decompressed
	// size the reader accepts, and the batch's compressed size.
	HeaderDLQEndOffset       = "wmrl-dlq-source-end-offset"
	HeaderDLQLimitBytes      = "wmrl-dlq-limit-bytes"
	HeaderDLQCompressedBytes = "wmrl-dlq-source-compressed-bytes"
)

// Content types of record values.
const (
	ContentTypeJSON  = "application/json"
	ContentTypeArrow = "application/vnd.apache.arrow.stream"
	// ContentTypeBinary marks the calibration topic's binary values (snapshots, window
	// chunks), whose layouts EncodeCalibration and EncodeCalibrationChunk document.
	ContentTypeBinary = "application/octet-stream"
	// ContentTypeProtobuf marks a record topic's value written in FormatProtobuf.
	ContentTypeProtobuf = "application/x-protobuf"
)

// ContentTypeFor returns the content type of a schema's values: Arrow for advantages, binary for
// the calibration topic's snapshots, window chunks and end records, JSON else.
func ContentTypeFor(schema string) string {
	switch {
	case IsAdvantageSchema(schema):
		return ContentTypeArrow
	case schema == SchemaCalibration, schema == SchemaCalibrationChunk, schema == SchemaCalibrationEnd:
		return ContentTypeBinary
	}
	return ContentTypeJSON
}

// Headers returns the standard headers (schema, content type, run, step) followed by extra.
func Headers(schema, run string, step int64, extra ...kgo.RecordHeader) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, 4+len(extra))
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderSchema, Value: []byte(schema)},
		kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ContentTypeFor(schema))},
		kgo.RecordHeader{Key: HeaderRun, Value: []byte(run)},
		kgo.RecordHeader{Key: HeaderStep, Value: []byte(strconv.FormatInt(step, 10))},
	)
	return append(hs, extra...)
}

// Header builds one header from a string value.
func Header(key, value string) kgo.RecordHeader {
	return kgo.RecordHeader{Key: key, Value: []byte(value)}
}

// HeaderValue returns the value of the last header named key. The last one wins so that headers
// appended later (a DLQ writer's, for instance) take precedence over earlier ones of the same name.
func HeaderValue(hs []kgo.RecordHeader, key string) (string, bool) {
	v, ok := lastHeader(hs, key)
	return string(v), ok
}

// lastHeader is HeaderValue without the string copy, for the per-record paths that only compare
// the value (`switch string(v)` allocates nothing).
func lastHeader(hs []kgo.RecordHeader, key string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// ErrBadHeader marks a header that is missing or unparseable.
var ErrBadHeader = errors.New("bad header")

// FormatChunk renders the wmrl-chunk value "i/n".
func FormatChunk(i, n int) string {
	return strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

// ParseChunk parses a wmrl-chunk value "i/n" with 0 <= i < n. Only canonical decimal numbers are
// accepted (no sign, no leading zeros, no spaces), so FormatChunk(ParseChunk(v)) == v.
func ParseChunk(v string) (i, n int, err error) {
	a, b, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%s %q: want i/n: %w", HeaderChunk, v, ErrBadHeader)
	}
	if i, err = parseCanonicalInt(a); err != nil {
		return 0, 0, fmt.Errorf("%s %q: chunk index: %w", HeaderChunk, v, err)
	}
	if n, err = parseCanonicalInt(b); err != nil {
		return 0, 0, fmt.Errorf("%s %q: chunk count: %w", HeaderChunk, v, err)
	}
	if i >= n {
		return 0, 0, fmt.Errorf("%s %q: index must be below the count: %w", HeaderChunk, v, ErrBadHeader)
	}
	return i, n, nil
}

// ParseStep parses a wmrl-step header value (a canonical non-negative decimal).
func ParseStep(v string) (int64, error) {
	n, err := parseCanonicalInt(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", HeaderStep, v, err)
	}
	return int64(n), nil
}

// parseCanonicalInt accepts 0 or a decimal without leading zeros that fits in an int.
func parseCanonicalInt(s string) (int, error) {
	if s == "" || len(s) > 18 {
		return 0, fmt.Errorf("want 1 to 18 decimal digits: %w", ErrBadHeader)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("leading zero: %w", ErrBadHeader)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("non-digit %q: %w", rune(c), ErrBadHeader)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}
