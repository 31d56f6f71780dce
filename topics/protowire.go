package topics

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The decoders of the high-volume records read the Protobuf wire format straight into the topics
// types with protowire, instead of unmarshalling a generated message and copying it: the generated
// path costs one allocation per string field plus the message, and was barely faster than the
// JSON decoder (docs/formats.md). Here every string of a record is a substring of one copy of the
// record (one allocation), and nothing else is allocated but maps and slices the record has. The
// price: any one string kept keeps the record's copy alive, which for these records (ids and
// short labels, kept no longer than the record itself) is the same memory.
// TestProtoWireMatchesGenerated and FuzzDecodeProto hold these decoders to the generated code
// (topics/wirepb): whatever they accept, the generated code accepts and decodes to equal values.
//
// Stricter than the generated code: a known field with the wrong wire type is refused (malformed,
// naming the field) where protobuf-go would keep it as an unknown field, and a timestamp's nanos
// must lie in [0, 1e9).

// wireReader walks one message. The first fault sticks in err; later reads return zero values.
type wireReader struct {
	b    []byte
	s    string // string(b) of the outermost record: strings are slices of it
	base int    // offset of b within s
	off  int
	kind string
	// prefix and index name an embedded message's fields in errors (`groups[2].size`,
	// `created_at.nanos`); the name is built only when a field fails, so decoding allocates none.
	prefix string
	index  int
	err    error
	// tsSec and tsNanos are the timestamp read so far (timestamp merges repeated occurrences).
	tsSec, tsNanos int64
}

func newWireReader(b []byte, kind string) wireReader {
	return wireReader{b: b, s: string(b), kind: kind, index: -1}
}

func (w *wireReader) name(field string) string {
	switch {
	case w.prefix == "":
		return field
	case field == "" && w.index < 0:
		return w.prefix
	case field == "":
		return fmt.Sprintf("%s[%d]", w.prefix, w.index)
	case w.index < 0:
		return w.prefix + "." + field
	}
	return fmt.Sprintf("%s[%d].%s", w.prefix, w.index, field)
}

// next reads the next tag; false at the end of the message or after a fault.
func (w *wireReader) next() (protowire.Number, protowire.Type, bool) {
	if w.err != nil || w.off >= len(w.b) {
		return 0, 0, false
	}
	num, typ, n := protowire.ConsumeTag(w.b[w.off:])
	if n < 0 {
		w.fail("", protowire.ParseError(n))
		return 0, 0, false
	}
	if !num.IsValid() { // ConsumeTag checks the lower bound only
		w.fail("", fmt.Errorf("field number %d out of range", num))
		return 0, 0, false
	}
	w.off += n
	return num, typ, true
}

func (w *wireReader) fail(field string, err error) {
	switch {
	case w.err != nil:
	case field == "" && w.prefix == "": // the bytes are not a message at all
		w.err = malformed("protobuf", fmt.Errorf("%s record: %w", w.kind, err))
	default: // as a JSON member of the wrong type: the field is named
		w.err = &FieldError{Record: w.kind, Field: w.name(field), Reason: err.Error(), Err: ErrMalformed}
	}
}

func (w *wireReader) want(field string, got, want protowire.Type) bool {
	if got != want {
		w.fail(field, fmt.Errorf("wire type %d, want %d", got, want))
		return false
	}
	return true
}

// skip passes over a field this reader does not know (a newer schema's field).
func (w *wireReader) skip(num protowire.Number, typ protowire.Type) {
	n := protowire.ConsumeFieldValue(num, typ, w.b[w.off:])
	if n < 0 {
		w.fail("", protowire.ParseError(n))
		return
	}
	w.off += n
}

func (w *wireReader) varint(field string, typ protowire.Type) uint64 {
	if !w.want(field, typ, protowire.VarintType) {
		return 0
	}
	v, n := protowire.ConsumeVarint(w.b[w.off:])
	if n < 0 {
		w.fail(field, protowire.ParseError(n))
		return 0
	}
	w.off += n
	return v
}

func (w *wireReader) int64(field string, typ protowire.Type) int64 {
	return int64(w.varint(field, typ))
}

func (w *wireReader) bool(field string, typ protowire.Type) bool { return w.varint(field, typ) != 0 }

func (w *wireReader) double(field string, typ protowire.Type) float64 {
	if !w.want(field, typ, protowire.Fixed64Type) {
		return 0
	}
	v, n := protowire.ConsumeFixed64(w.b[w.off:])
	if n < 0 {
		w.fail(field, protowire.ParseError(n))
		return 0
	}
	w.off += n
	return math.Float64frombits(v)
}

// span reads a length-delimited field and returns its bounds within w.b.
func (w *wireReader) span(field string, typ protowire.Type) (int, int, bool) {
	if !w.want(field, typ, protowire.BytesType) {
		return 0, 0, false
	}
	v, n := protowire.ConsumeVarint(w.b[w.off:])
	if n < 0 {
		w.fail(field, protowire.ParseError(n))
		return 0, 0, false
	}
	start := w.off + n
	if v > uint64(len(w.b)-start) {
		w.fail(field, fmt.Errorf("length %d past the end of the message", v))
		return 0, 0, false
	}
	end := start + int(v)
	w.off = end
	return start, end, true
}

// str reads a string field (valid UTF-8, as proto3 requires) without copying it.
func (w *wireReader) str(field string, typ protowire.Type) string {
	i, j, ok := w.span(field, typ)
	if !ok {
		return ""
	}
	s := w.s[w.base+i : w.base+j]
	if !utf8.ValidString(s) {
		w.fail(field, fmt.Errorf("invalid UTF-8"))
		return ""
	}
	return s
}

// sub returns a reader over an embedded message field; index >= 0 is its place in a repeated field.
func (w *wireReader) sub(field string, index int, typ protowire.Type) (wireReader, bool) {
	i, j, ok := w.span(field, typ)
	if !ok {
		return wireReader{}, false
	}
	return wireReader{b: w.b[i:j], s: w.s, base: w.base + i, kind: w.kind, prefix: field, index: index}, true
}

// join carries a sub-reader's fault to its parent.
func (w *wireReader) join(sub *wireReader) {
	if sub.err != nil && w.err == nil {
		w.err = sub.err
	}
}

// timestamp reads a google.protobuf.Timestamp field (a record has one). A message field that
// occurs twice is merged, as Protobuf does: the second occurrence's fields overwrite the first's,
// so the seconds and nanos read so far are kept on w.
func (w *wireReader) timestamp(field string, typ protowire.Type) time.Time {
	r, ok := w.sub(field, -1, typ)
	if !ok {
		return time.Time{}
	}
	sec, nanos := w.tsSec, w.tsNanos
	defer func() { w.tsSec, w.tsNanos = sec, nanos }()
	for num, t, ok := r.next(); ok; num, t, ok = r.next() {
		switch num {
		case 1:
			sec = r.int64("seconds", t)
		case 2:
			nanos = int64(int32(r.varint("nanos", t)))
		default:
			r.skip(num, t)
		}
	}
	w.join(&r)
	if nanos < 0 || nanos >= 1e9 {
		w.fail(field+".nanos", fmt.Errorf("%d out of range [0, 1e9)", nanos))
	}
	return time.Unix(sec, nanos).UTC()
}

func (w *wireReader) done() error { return w.err }

// decodeRef reads the six rollout-reference fields both rewards number 1..6; false when num is
// not one of them.
func (w *wireReader) decodeRef(r *RolloutRef, num protowire.Number, typ protowire.Type) bool {
	switch num {
	case 1:
		r.RunID = w.str("run_id", typ)
	case 2:
		r.Step = w.int64("step", typ)
	case 3:
		r.GroupID = w.str("group_id", typ)
	case 4:
		r.RolloutID = w.str("rollout_id", typ)
	case 5:
		r.Stream = w.str("stream", typ)
	case 6:
		r.PolicyVersion = w.str("policy_version", typ)
	default:
		return false
	}
	return true
}

func wirePredicted(b []byte, p *PredictedReward) error {
	w := newWireReader(b, "predicted")
	for num, typ, ok := w.next(); ok; num, typ, ok = w.next() {
		if w.decodeRef(&p.RolloutRef, num, typ) {
			continue
		}
		switch num {
		case 7:
			p.Anchor = w.bool("anchor", typ)
		case 8:
			v := w.double("score", typ)
			p.Score = &v
		case 9:
			p.Status = Status(w.str("status", typ))
		case 10:
			p.Reason = w.str("reason", typ)
		case 11:
			p.Model = w.str("model", typ)
		case 12:
			p.Attempts = int(w.int64("attempts", typ))
		case 13:
			p.LatencyMS = w.double("latency_ms", typ)
		case 14:
			p.CreatedAt = w.timestamp("created_at", typ)
		default:
			w.skip(num, typ)
		}
	}
	return w.done()
}

func wireExecuted(b []byte, e *ExecutedReward) error {
	w := newWireReader(b, "executed")
	for num, typ, ok := w.next(); ok; num, typ, ok = w.next() {
		if w.decodeRef(&e.RolloutRef, num, typ) {
			continue
		}
		switch num {
		case 7:
			v := w.double("score", typ)
			e.Score = &v
		case 8:
			e.Imputed = w.bool("imputed", typ)
		case 9:
			e.Status = Status(w.str("status", typ))
		case 10:
			e.Reason = w.str("reason", typ)
		case 11:
			e.ExitCode = int(w.int64("exit_code", typ))
		case 12:
			e.DurationMS = w.double("duration_ms", typ)
		case 13:
			e.StderrTail = w.str("stderr_tail", typ)
		case 14:
			e.CreatedAt = w.timestamp("created_at", typ)
		default:
			w.skip(num, typ)
		}
	}
	return w.done()
}

func wireStep(b []byte, s *StepManifest) error {
	w := newWireReader(b, "step")
	for num, typ, ok := w.next(); ok; num, typ, ok = w.next() {
		switch num {
		case 1:
			s.RunID = w.str("run_id", typ)
		case 2:
			s.Step = w.int64("step", typ)
		case 3:
			s.PolicyVersion = w.str("policy_version", typ)
		case 4:
			v := w.int64("policy_step", typ)
			s.PolicyStep = &v
		case 5:
			s.EndOfRun = w.bool("end_of_run", typ)
		case 6:
			r, ok := w.sub("groups", len(s.Groups), typ)
			if !ok {
				continue
			}
			var g GroupManifest
			for num, t, ok := r.next(); ok; num, t, ok = r.next() {
				switch num {
				case 1:
					g.GroupID = r.str("group_id", t)
				case 2:
					g.Stream = r.str("stream", t)
				case 3:
					g.Size = int(r.int64("size", t))
				case 4:
					g.Anchor = r.bool("anchor", t)
				default:
					r.skip(num, t)
				}
			}
			w.join(&r)
			s.Groups = append(s.Groups, g)
		case 7:
			s.CreatedAt = w.timestamp("created_at", typ)
		default:
			w.skip(num, typ)
		}
	}
	return w.done()
}

func wireRollout(b []byte, r *Rollout) error {
	w := newWireReader(b, "rollout")
	for num, typ, ok := w.next(); ok; num, typ, ok = w.next() {
		switch num {
		case 1:
			r.RunID = w.str("run_id", typ)
		case 2:
			r.Step = w.int64("step", typ)
		case 3:
			r.GroupID = w.str("group_id", typ)
		case 4:
			r.RolloutID = w.str("rollout_id", typ)
		case 5:
			r.Stream = w.str("stream", typ)
		case 6:
			r.PolicyVersion = w.str("policy_version", typ)
		case 7:
			r.Anchor = w.bool("anchor", typ)
		case 8:
			r.Index = int(w.int64("index", typ))
		case 9:
			r.Prompt = w.str("prompt", typ)
		case 10:
			r.Artifact = w.str("artifact", typ)
		case 11:
			r.ArtifactURI = w.str("artifact_uri", typ)
		case 12:
			r.ArtifactSHA256 = w.str("artifact_sha256", typ)
		case 13:
			r.ArtifactSize = w.int64("artifact_size", typ)
		case 14:
			e, ok := w.sub("meta", -1, typ)
			if !ok {
				continue
			}
			var k, v string
			for num, t, ok := e.next(); ok; num, t, ok = e.next() {
				switch num {
				case 1:
					k = e.str("key", t)
				case 2:
					v = e.str("value", t)
				default:
					e.skip(num, t)
				}
			}
			w.join(&e)
			if r.Meta == nil {
				r.Meta = make(map[string]string, 4)
			}
			r.Meta[k] = v
		case 15:
			r.CreatedAt = w.timestamp("created_at", typ)
		default:
			w.skip(num, typ)
		}
	}
	return w.done()
}
