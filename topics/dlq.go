package topics

import (
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

// DeadLetterWriter turns records a stage cannot process into dead letters on the DLQ topic. It
// only builds the record: the caller produces it, inside its transaction when it has one, so a
// record is either processed or dead-lettered, exactly once.
type DeadLetterWriter struct {
	names Names
	stage string
}

// NewDeadLetterWriter returns a writer for the stage named stage (e.g. "worldmodel"), writing to
// names.DLQ().
func NewDeadLetterWriter(names Names, stage string) *DeadLetterWriter {
	return &DeadLetterWriter{names: names, stage: stage}
}

// Record returns the dead letter for src failing with err. It keeps src's key and original value
// bytes (copied, not re-encoded, so the exact input can be replayed or inspected), then its
// headers verbatim and in order, then appends the DLQ headers: reason (Reason(err)), error text
// (truncated to MaxDLQErrorLen), stage, source topic, partition, offset and timestamp (unix
// milliseconds). Because the DLQ headers come last, HeaderValue finds them even when src was
// itself a dead letter. The record's own timestamp is left for the producer to set, so DLQ
// retention counts from the failure, not from the original write.
func (w *DeadLetterWriter) Record(src *kgo.Record, err error) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(src.Headers)+7)
	for _, h := range src.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)})
	}
	reason, text := Reason(err), ""
	if err != nil {
		text = truncateUTF8(err.Error(), MaxDLQErrorLen)
	}
	if reason == "" {
		reason = "error"
	}
	hs = append(hs,
		Header(HeaderDLQReason, reason),
		Header(HeaderDLQError, text),
		Header(HeaderDLQStage, w.stage),
		Header(HeaderDLQTopic, src.Topic),
		Header(HeaderDLQPartition, strconv.FormatInt(int64(src.Partition), 10)),
		Header(HeaderDLQOffset, strconv.FormatInt(src.Offset, 10)),
		Header(HeaderDLQSourceTimestamp, strconv.FormatInt(src.Timestamp.UnixMilli(), 10)),
	)
	return &kgo.Record{Topic: w.names.DLQ(), Key: clone(src.Key), Value: clone(src.Value), Headers: hs}
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
	var orig []kgo.RecordHeader
	for i, h := range r.Headers {
		if !mine[i] {
			orig = append(orig, h)
		}
	}
	return DeadLetter{
		Key: r.Key, Value: r.Value,
		Reason: get(HeaderDLQReason), Error: get(HeaderDLQError), Stage: get(HeaderDLQStage),
		SourceTopic: get(HeaderDLQTopic), SourcePartition: int32(part), SourceOffset: off,
		SourceTime: time.UnixMilli(ms).UTC(), Headers: orig,
	}, nil
}
