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
	// Fields 1..15 (all of wmrl's) have one-byte tags: read those without the general parser.
	if c := w.b[w.off]; c < 0x80 && c>>3 != 0 {
		w.off++
		return protowire.Number(c >> 3), protowire.Type(c & 7), true
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
		w.wrongType(field, got, want)
		return false
	}
	return true
}

// wrongType is want's fault, apart so that want inlines into every field read.
func (w *wireReader) wrongType(field string, got, want protowire.Type) {
	w.fail(field, fmt.Errorf("wire type %d, want %d", got, want))
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
	if w.off < len(w.b) && w.b[w.off] < 0x80 { // one byte: values below 128, most of them
		v := uint64(w.b[w.off])
		w.off++
		return v
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
	var v uint64
	n := 1
	if w.off < len(w.b) && w.b[w.off] < 0x80 { // one byte: lengths below 128, most of them
		v = uint64(w.b[w.off])
	} else if v, n = protowire.ConsumeVarint(w.b[w.off:]); n < 0 {
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

// fields walks the message w reads, calling field for each of its fields; a field it does not
// know (field returns false: a newer schema's field) is skipped. Every message decoder is this
// loop around a switch on the field number, so only the switch is written per message.
func (w *wireReader) fields(field func(num protowire.Number, typ protowire.Type) bool) error {
	for num, typ, ok := w.next(); ok; num, typ, ok = w.next() {
		if !field(num, typ) {
			w.skip(num, typ)
		}
	}
	return w.err
}

// message reads an embedded message field with fields, on w itself (index >= 0 is its place in
// a repeated field): w reads the field's bytes, named `field` or `field[index]` in errors, then
// resumes after them. w is not copied into a sub-reader because the field closures hold w, and
// a reader handed to a closure as an argument would be moved to the heap. False when the field
// is not a well-framed message.
func (w *wireReader) message(field string, index int, typ protowire.Type, fn func(num protowire.Number, typ protowire.Type) bool) bool {
	i, j, ok := w.span(field, typ)
	if !ok {
		return false
	}
	b, base, prefix, idx := w.b, w.base, w.prefix, w.index
	w.b, w.base, w.off, w.prefix, w.index = b[i:j], base+i, 0, field, index
	w.fields(fn)
	w.b, w.base, w.off, w.prefix, w.index = b, base, j, prefix, idx
	return true
}

// timestamp reads a google.protobuf.Timestamp field (a record has one). A message field that
// occurs twice is merged, as Protobuf does: the second occurrence's fields overwrite the first's,
// so the seconds and nanos read so far are kept on w.
func (w *wireReader) timestamp(field string, typ protowire.Type) time.Time {
	sec, nanos := w.tsSec, w.tsNanos
	ok := w.message(field, -1, typ, func(num protowire.Number, t protowire.Type) bool {
		switch num {
		case 1:
			sec = w.int64("seconds", t)
		case 2:
			nanos = int64(int32(w.varint("nanos", t)))
		default:
			return false
		}
		return true
	})
	if !ok {
		return time.Time{}
	}
	w.tsSec, w.tsNanos = sec, nanos
	if nanos < 0 || nanos >= 1e9 {
		w.fail(field+".nanos", fmt.Errorf("%d out of range [0, 1e9)", nanos))
	}
	return time.Unix(sec, nanos).UTC()
}

// decodeRef reads the six rollout-reference fields a rollout and both rewards number 1..6; false
// when num is not one of them.
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
	return w.fields(func(num protowire.Number, typ protowire.Type) bool {
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
			return w.decodeRef(&p.RolloutRef, num, typ)
		}
		return true
	})
}

func wireExecuted(b []byte, e *ExecutedReward) error {
	w := newWireReader(b, "executed")
	return w.fields(func(num protowire.Number, typ protowire.Type) bool {
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
			return w.decodeRef(&e.RolloutRef, num, typ)
		}
		return true
	})
}

func wireStep(b []byte, s *StepManifest) error {
	w := newWireReader(b, "step")
	return w.fields(func(num protowire.Number, typ protowire.Type) bool {
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
			var g GroupManifest
			ok := w.message("groups", len(s.Groups), typ, func(num protowire.Number, t protowire.Type) bool {
				switch num {
				case 1:
					g.GroupID = w.str("group_id", t)
				case 2:
					g.Stream = w.str("stream", t)
				case 3:
					g.Size = int(w.int64("size", t))
				case 4:
					g.Anchor = w.bool("anchor", t)
				default:
					return false
				}
				return true
			})
			if ok {
				s.Groups = append(s.Groups, g)
			}
		case 7:
			s.CreatedAt = w.timestamp("created_at", typ)
		default:
			return false
		}
		return true
	})
}

func wireRollout(b []byte, r *Rollout) error {
	w := newWireReader(b, "rollout")
	return w.fields(func(num protowire.Number, typ protowire.Type) bool {
		switch num {
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
			var k, v string
			ok := w.message("meta", -1, typ, func(num protowire.Number, t protowire.Type) bool {
				switch num {
				case 1:
					k = w.str("key", t)
				case 2:
					v = w.str("value", t)
				default:
					return false
				}
				return true
			})
			if ok {
				if r.Meta == nil {
					r.Meta = make(map[string]string, 4)
				}
				r.Meta[k] = v
			}
		case 15:
			r.CreatedAt = w.timestamp("created_at", typ)
		default:
			return w.decodeRef(&r.RolloutRef, num, typ)
		}
		return true
	})
}
