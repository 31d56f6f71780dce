package topics

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// snapMagic opens a binary (v2) calibration snapshot. A v1 snapshot is a JSON object, so its
// first byte is '{' and the two never collide.
const snapMagic = "WMRLCAL\x02"

// errSnapTruncated is the cause of every malformed-binary error for a value that ends early.
var errSnapTruncated = errors.New("value ends early")

// EncodeCalibration validates s and encodes it as a binary (v2) snapshot. An empty or v1 Schema
// becomes SchemaCalibrationV2: the value is written in the newest layout whatever it was read
// from, as the correction consumer migrates a v1 changelog by writing it anew.
//
// Layout (little endian): magic[8] | run_id, stream, config_hash, digest (u16 length + bytes) |
// step i64 | fit_version u64 | pairs u64 | step_pairs u64 | anchor_weight, bias_before,
// bias_after f64 | created_at unix seconds i64, nanoseconds u32 | n u32, n×break_x f64,
// n×break_y f64 | state (u32 length + bytes). Nothing may follow.
func EncodeCalibration(s CalibrationSnapshot) ([]byte, error) {
	if s.Schema == "" || s.Schema == SchemaCalibration {
		s.Schema = SchemaCalibrationV2
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b := appendCalibration(nil, &s)
	if len(b) > MaxRecordBytes {
		return nil, &FieldError{Record: recordName("calibration", "run", s.RunID, "stream", s.Stream),
			Field: "state", Value: len(s.State), Reason: fmt.Sprintf("snapshot of %d bytes exceeds %d", len(b), MaxRecordBytes), Err: ErrTooLarge}
	}
	return b, nil
}

// appendCalibration appends s's v2 encoding to b without validating it (EncodeCalibration does).
func appendCalibration(b []byte, s *CalibrationSnapshot) []byte {
	le := binary.LittleEndian
	str := func(b []byte, v string) []byte { return append(le.AppendUint16(b, uint16(len(v))), v...) }
	f64 := func(b []byte, v float64) []byte { return le.AppendUint64(b, math.Float64bits(v)) }
	b = append(b, snapMagic...)
	b = str(str(str(str(b, s.RunID), s.Stream), s.ConfigHash), s.Digest)
	b = le.AppendUint64(b, uint64(s.Step))
	b = le.AppendUint64(b, s.FitVersion)
	b = le.AppendUint64(b, uint64(s.Pairs))
	b = le.AppendUint64(b, uint64(s.StepPairs))
	b = f64(f64(f64(b, s.AnchorWeight), s.BiasBefore), s.BiasAfter)
	b = le.AppendUint64(b, uint64(s.CreatedAt.Unix()))
	b = le.AppendUint32(b, uint32(s.CreatedAt.Nanosecond()))
	b = le.AppendUint32(b, uint32(len(s.BreakX)))
	for _, x := range s.BreakX {
		b = f64(b, x)
	}
	for _, y := range s.BreakY {
		b = f64(b, y)
	}
	b = le.AppendUint32(b, uint32(len(s.State)))
	return append(b, s.State...)
}

// isBinaryCalibration reports whether b is a v2 snapshot (by its magic).
func isBinaryCalibration(b []byte) bool { return bytes.HasPrefix(b, []byte(snapMagic)) }

// snapReader reads decodeCalibrationBinary's fields, remembering the first shortfall so the
// decoder reads straight through.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errSnapTruncated
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapReader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *snapReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *snapReader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *snapReader) f64() float64 { return math.Float64frombits(r.u64()) }

func (r *snapReader) str() string { return string(r.take(int(r.u16()))) }

// count reads a u32 element count and checks that size bytes per element remain, so a corrupt
// count cannot make the decoder allocate.
func (r *snapReader) count(size int) int {
	n := int(r.u32())
	if r.err == nil && n > len(r.b)/size {
		r.err = errSnapTruncated
		return 0
	}
	return n
}

// decodeCalibrationBinary decodes a v2 snapshot; the caller validates it.
func decodeCalibrationBinary(b []byte) (CalibrationSnapshot, error) {
	if len(b) > MaxRecordBytes {
		return CalibrationSnapshot{}, &FieldError{Record: "calibration", Field: "value", Value: len(b),
			Reason: fmt.Sprintf("exceeds %d bytes", MaxRecordBytes), Err: ErrTooLarge}
	}
	r := snapReader{b: b[len(snapMagic):]}
	s := CalibrationSnapshot{Schema: SchemaCalibrationV2}
	s.RunID, s.Stream, s.ConfigHash, s.Digest = r.str(), r.str(), r.str(), r.str()
	s.Step = int64(r.u64())
	s.FitVersion = r.u64()
	pairs, stepPairs := r.u64(), r.u64()
	s.AnchorWeight, s.BiasBefore, s.BiasAfter = r.f64(), r.f64(), r.f64()
	sec, nsec := int64(r.u64()), r.u32()
	n := r.count(16)
	if n > 0 {
		s.BreakX, s.BreakY = make([]float64, n), make([]float64, n)
		for i := range s.BreakX {
			s.BreakX[i] = r.f64()
		}
		for i := range s.BreakY {
			s.BreakY[i] = r.f64()
		}
	}
	if st := r.take(r.count(1)); len(st) > 0 {
		s.State = bytes.Clone(st)
	}
	if r.err != nil {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: %w", r.err))
	}
	if len(r.b) > 0 {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: %d bytes after the state", len(r.b)))
	}
	record := recordName("calibration", "run", s.RunID, "stream", s.Stream)
	if pairs > math.MaxInt32 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "pairs", Value: pairs, Reason: "out of range"}
	}
	if stepPairs > math.MaxInt32 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "step_pairs", Value: stepPairs, Reason: "out of range"}
	}
	if nsec >= 1e9 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "created_at", Value: nsec, Reason: "nanoseconds out of range"}
	}
	s.Pairs, s.StepPairs = int(pairs), int(stepPairs)
	s.CreatedAt = time.Unix(sec, int64(nsec)).UTC()
	return s, nil
}
