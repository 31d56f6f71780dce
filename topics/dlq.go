package topics

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// MaxDLQErrorLen bounds the wmrl-dlq-error header; the full error can repeat payload fragments,
// and a header that pushes the record over the broker limit would lose the dead letter itself.
const MaxDLQErrorLen = 4096

// Bounds on what a dead letter copies from its source record. A dead letter must be deliverable:
// the broker refuses records over max.message.bytes (1 MiB by default; checked on the compressed
// batch, so a 10 MB record of repetitive JSON gets in) and franz-go refuses records over
// ProducerBatchMaxBytes before sending. A dead letter that cannot be produced would otherwise
// fail the stage on the same input for ever. A part over its bound is left out and described by
// headers instead (HeaderDLQOmitted, its size and SHA-256), so the original can still be matched.
const (
	// DefaultDLQMaxValueBytes bounds the value copied into a dead letter (a quarter of the
	// broker's default limit, leaving room for key, headers and batch overhead).
	DefaultDLQMaxValueBytes = 256 << 10
	// MaxDLQKeyBytes bounds the key copied into a dead letter (valid keys are ids of at most
	// MaxIDLen bytes).
	MaxDLQKeyBytes = 4 << 10
	// MaxDLQHeaderBytes bounds the source headers (keys and values together) a dead letter copies.
	MaxDLQHeaderBytes = 64 << 10
)

// Parts of a source record a dead letter can leave out, listed in HeaderDLQOmitted.
const (
	OmittedKey     = "key"
	OmittedValue   = "value"
	OmittedHeaders = "headers"
)

// DeadLetterWriter turns records a stage cannot process into dead letters on the DLQ topic. It
// only builds the record: the caller produces it, inside its transaction when it has one, so a
// record is either processed or dead-lettered, exactly once.
type DeadLetterWriter struct {
	names      Names
	stage      string
	maxValue   int
	maxHeaders int
}

// NewDeadLetterWriter returns a writer for the stage named stage (e.g. "worldmodel"), writing to
// names.DLQ(), copying values of at most DefaultDLQMaxValueBytes.
func NewDeadLetterWriter(names Names, stage string) *DeadLetterWriter {
	return &DeadLetterWriter{names: names, stage: stage, maxValue: DefaultDLQMaxValueBytes, maxHeaders: MaxDLQHeaderBytes}
}

// WithMaxValueBytes returns a copy of w that copies values of at most n bytes (n ≤ 0: none); a
// DLQ topic with a lower max.message.bytes than the broker default needs a smaller bound.
func (w *DeadLetterWriter) WithMaxValueBytes(n int) *DeadLetterWriter {
	c := *w
	c.maxValue = max(n, 0)
	return &c
}

// Minimal returns a copy of w whose dead letters carry no value and no source headers, only
// their descriptions (a few hundred bytes with the key): the fallback when Kafka refused a full
// dead letter.
func (w *DeadLetterWriter) Minimal() *DeadLetterWriter {
	c := *w
	c.maxValue, c.maxHeaders = 0, 0
	return &c
}

// Record returns the dead letter for src failing with err. It keeps src's key and original value
// bytes (copied, not re-encoded, so the exact input can be replayed or inspected), then its
// headers verbatim and in order, then appends the DLQ headers: reason (Reason(err)), error text
// (truncated to MaxDLQErrorLen), stage, source topic, partition, offset and timestamp (unix
// milliseconds). Because the DLQ headers come last, HeaderValue finds them even when src was
// itself a dead letter. The record's own timestamp is left for the producer to set, so DLQ
// retention counts from the failure, not from the original write.
//
// A key over MaxDLQKeyBytes, a value over the writer's bound or source headers over
// MaxDLQHeaderBytes (0 for Minimal) are left out (nil key or value, no source headers); HeaderDLQOmitted lists
// them and, per part, wmrl-dlq-<part>-bytes gives its original size and, for key and value,
// wmrl-dlq-<part>-sha256 its hex SHA-256. These headers follow the fixed DLQ headers.
func (w *DeadLetterWriter) Record(src *kgo.Record, err error) *kgo.Record {
	var omitted []string
	var extra []kgo.RecordHeader
	key, value := src.Key, src.Value
	if len(key) > MaxDLQKeyBytes {
		omitted, extra = append(omitted, OmittedKey), append(extra, digestHeaders(OmittedKey, key)...)
		key = nil
	}
	if len(value) > w.maxValue {
		omitted, extra = append(omitted, OmittedValue), append(extra, digestHeaders(OmittedValue, value)...)
		value = nil
	}
	srcHeaders := src.Headers
	if n := headerBytes(srcHeaders); n > w.maxHeaders {
		omitted = append(omitted, OmittedHeaders)
		extra = append(extra, Header(dlqPartHeader(OmittedHeaders, "bytes"), strconv.Itoa(n)))
		srcHeaders = nil
	}
	hs := make([]kgo.RecordHeader, 0, len(srcHeaders)+8+len(extra))
	for _, h := range srcHeaders {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)})
	}
	reason, text := Reason(err), ""
	if err != nil {
		text = truncateUTF8(err.Error(), MaxDLQErrorLen)
	}
	reason = cmp.Or(reason, "error")
	hs = append(hs,
		Header(HeaderDLQReason, reason),
		Header(HeaderDLQError, text),
		Header(HeaderDLQStage, w.stage),
		Header(HeaderDLQTopic, src.Topic),
		Header(HeaderDLQPartition, strconv.FormatInt(int64(src.Partition), 10)),
		Header(HeaderDLQOffset, strconv.FormatInt(src.Offset, 10)),
		Header(HeaderDLQSourceTimestamp, strconv.FormatInt(src.Timestamp.UnixMilli(), 10)),
	)
	if len(omitted) > 0 {
		hs = append(hs, Header(HeaderDLQOmitted, strings.Join(omitted, ",")))
		hs = append(hs, extra...)
	}
	return &kgo.Record{Topic: w.names.DLQ(), Key: clone(key), Value: clone(value), Headers: hs}
}

// dlqPartHeader names the header describing an omitted part, e.g. wmrl-dlq-value-sha256.
func dlqPartHeader(part, what string) string { return "wmrl-dlq-" + part + "-" + what }

func digestHeaders(part string, b []byte) []kgo.RecordHeader {
	sum := sha256.Sum256(b)
	return []kgo.RecordHeader{
		Header(dlqPartHeader(part, "bytes"), strconv.Itoa(len(b))),
		Header(dlqPartHeader(part, "sha256"), hex.EncodeToString(sum[:])),
	}
}

func headerBytes(hs []kgo.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func truncateUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// DeadLetter is a parsed dead letter, for DLQ tooling and tests.
type DeadLetter struct {
	Key, Value      []byte
	Reason          string
	Error           string
	Stage           string
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	SourceTime      time.Time
	// Headers are the original record's headers, without this dead letter's DLQ headers.
	Headers []kgo.RecordHeader
	// Omitted describes the parts of the source record the dead letter left out for size, in the
	// order of HeaderDLQOmitted (nil when it carries the whole record).
	Omitted []OmittedPart
	// SourceEndOffset is the offset after the last source record: SourceOffset+1 for a dead
	// letter of one record, the batch's next offset for one that references a batch
	// (BatchRecord), which also sets LimitBytes and, when known, CompressedBytes.
	SourceEndOffset int64
	LimitBytes      int
	CompressedBytes int
}

// OmittedPart is a part of a source record (OmittedKey, OmittedValue or OmittedHeaders) that a
// dead letter left out: its original size and, for key and value, its hex SHA-256.
type OmittedPart struct {
	Part   string
	Bytes  int
	SHA256 string
}

var dlqHeaderKeys = []string{HeaderDLQReason, HeaderDLQError, HeaderDLQStage, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQSourceTimestamp}

// ParseDeadLetter reads a record written by DeadLetterWriter.Record. The last occurrence of each
// DLQ header belongs to this dead letter; everything else is the original record's headers.
func ParseDeadLetter(r *kgo.Record) (DeadLetter, error) {
	last := make(map[string]int, len(dlqHeaderKeys))
	for i, h := range r.Headers {
		if strings.HasPrefix(h.Key, "wmrl-dlq-") {
			last[h.Key] = i
		}
	}
	for _, k := range dlqHeaderKeys {
		if _, ok := last[k]; !ok {
			return DeadLetter{}, fmt.Errorf("dead letter: header %s missing: %w", k, ErrBadHeader)
		}
	}
	get := func(k string) string { return string(r.Headers[last[k]].Value) }
	part, err := strconv.ParseInt(get(HeaderDLQPartition), 10, 32)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %s: %w: %w", HeaderDLQPartition, ErrBadHeader, err)
	}
	off, err := strconv.ParseInt(get(HeaderDLQOffset), 10, 64)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %s: %w: %w", HeaderDLQOffset, ErrBadHeader, err)
	}
	ms, err := strconv.ParseInt(get(HeaderDLQSourceTimestamp), 10, 64)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %s: %w: %w", HeaderDLQSourceTimestamp, ErrBadHeader, err)
	}
	mine := make(map[int]bool, len(last))
	for _, k := range dlqHeaderKeys {
		mine[last[k]] = true
	}
	omitted, err := parseOmitted(r.Headers, last[HeaderDLQReason], mine)
	if err != nil {
		return DeadLetter{}, err
	}
	batch, err := parseBatchHeaders(r.Headers, last, mine)
	if err != nil {
		return DeadLetter{}, err
	}
	var orig []kgo.RecordHeader
	for i, h := range r.Headers {
		if !mine[i] {
			orig = append(orig, h)
		}
	}
	d := DeadLetter{
		Key: r.Key, Value: r.Value,
		Reason: get(HeaderDLQReason), Error: get(HeaderDLQError), Stage: get(HeaderDLQStage),
		SourceTopic: get(HeaderDLQTopic), SourcePartition: int32(part), SourceOffset: off,
		SourceTime: time.UnixMilli(ms).UTC(), Headers: orig, Omitted: omitted,
		SourceEndOffset: off + 1,
	}
	if batch[0] > 0 {
		d.SourceEndOffset, d.LimitBytes, d.CompressedBytes = batch[0], int(batch[1]), int(batch[2])
	}
	return d, nil
}

// parseBatchHeaders reads the end offset, limit and compressed size of a batch reference (0 when
// absent), which come after this dead letter's reason header, and marks their indexes in mine.
func parseBatchHeaders(hs []kgo.RecordHeader, last map[string]int, mine map[int]bool) ([3]int64, error) {
	var out [3]int64
	for j, k := range []string{HeaderDLQEndOffset, HeaderDLQLimitBytes, HeaderDLQCompressedBytes} {
		i, ok := last[k]
		if !ok || i < last[HeaderDLQReason] {
			continue
		}
		n, err := strconv.ParseInt(string(hs[i].Value), 10, 64)
		if err != nil || n < 0 {
			return out, fmt.Errorf("dead letter: %s %q: %w", k, hs[i].Value, ErrBadHeader)
		}
		out[j], mine[i] = n, true
	}
	return out, nil
}

// parseOmitted reads the omission headers that follow this dead letter's reason header (at
// index from; earlier ones belong to a dead letter that was itself dead-lettered) and marks
// their indexes in mine.
func parseOmitted(hs []kgo.RecordHeader, from int, mine map[int]bool) ([]OmittedPart, error) {
	idx := -1
	for i := from + 1; i < len(hs); i++ {
		if hs[i].Key == HeaderDLQOmitted {
			idx = i
		}
	}
	if idx < 0 {
		return nil, nil
	}
	mine[idx] = true
	var out []OmittedPart
	for _, part := range strings.Split(string(hs[idx].Value), ",") {
		o := OmittedPart{Part: part}
		for i := idx + 1; i < len(hs); i++ {
			switch hs[i].Key {
			case dlqPartHeader(part, "bytes"):
				n, err := strconv.Atoi(string(hs[i].Value))
				if err != nil {
					return nil, fmt.Errorf("dead letter: %s: %w: %w", hs[i].Key, ErrBadHeader, err)
				}
				o.Bytes, mine[i] = n, true
			case dlqPartHeader(part, "sha256"):
				o.SHA256, mine[i] = string(hs[i].Value), true
			}
		}
		out = append(out, o)
	}
	return out, nil
}
