package topics

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"
)

// snapMagic opens a binary (v2) calibration snapshot in layout 2, snapMagicDebias in layout 3
// (layout 2 plus the debias effect). A v1 snapshot is a JSON object, so its first byte is '{' and
// the two never collide. Both layouts carry schema v2: the magic alone says which one follows.
const (
	snapMagic       = "WMRLCAL\x02"
	snapMagicDebias = "WMRLCAL\x03"
)

// EncodeCalibration validates s and encodes it as a binary (v2) snapshot. An empty or v1 Schema
// becomes SchemaCalibrationV2: the value is written in the newest layout whatever it was read
// from, as the correction consumer migrates a v1 changelog by writing it anew.
//
// Layout 2 (little endian): magic[8] | run_id, stream, config_hash, digest (u16 length + bytes) |
// step i64 | fit_version u64 | pairs u64 | step_pairs u64 | anchor_weight, bias_before,
// bias_after f64 | created_at unix seconds i64, nanoseconds u32 | n u32, n×break_x f64,
// n×break_y f64 | state (u32 length + bytes). Nothing may follow.
//
// Layout 3, written when s.Debias is set, has magic "WMRLCAL\x03" and, right after created_at,
// the debias effect: rows, groups, reordered, flattened u32 | mean_shift f64. A snapshot without
// Debias is still written in layout 2, so readers that predate layout 3 read it unchanged.
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
	if s.Debias != nil {
		b = append(b, snapMagicDebias...)
	} else {
		b = append(b, snapMagic...)
	}
	for _, v := range []string{s.RunID, s.Stream, s.ConfigHash, s.Digest} {
		b = append(le.AppendUint16(b, uint16(len(v))), v...)
	}
	// binary.Append fails only for types without a fixed size; these all have one.
	b, _ = binary.Append(b, le, snapFixed{Step: s.Step, FitVersion: s.FitVersion,
		Pairs: uint64(s.Pairs), StepPairs: uint64(s.StepPairs),
		AnchorWeight: s.AnchorWeight, BiasBefore: s.BiasBefore, BiasAfter: s.BiasAfter,
		Sec: s.CreatedAt.Unix(), Nsec: uint32(s.CreatedAt.Nanosecond())})
	if d := s.Debias; d != nil {
		b, _ = binary.Append(b, le, snapDebias{Rows: uint32(d.Rows), Groups: uint32(d.Groups),
			Reordered: uint32(d.Reordered), Flattened: uint32(d.Flattened), MeanShift: d.MeanShift})
	}
	b = le.AppendUint32(b, uint32(len(s.BreakX)))
	b, _ = binary.Append(b, le, s.BreakX)
	b, _ = binary.Append(b, le, s.BreakY)
	b = le.AppendUint32(b, uint32(len(s.State)))
	return append(b, s.State...)
}

// isBinaryCalibration reports whether b is a v2 snapshot, in either layout (by its magic).
func isBinaryCalibration(b []byte) bool {
	return bytes.HasPrefix(b, []byte(snapMagic)) || bytes.HasPrefix(b, []byte(snapMagicDebias))
}

// snapDebias is layout 3's debias block (DebiasShift on the wire).
type snapDebias struct {
	Rows, Groups, Reordered, Flattened uint32
	MeanShift                          float64
}

// snapFixed is the fixed-width middle of the v2 layout, read in one binary.Read.
type snapFixed struct {
	Step                                int64
	FitVersion, Pairs, StepPairs        uint64
	AnchorWeight, BiasBefore, BiasAfter float64
	Sec                                 int64
	Nsec                                uint32
}

// decodeCalibrationBinary decodes a v2 snapshot; the caller validates it.
func decodeCalibrationBinary(b []byte) (CalibrationSnapshot, error) {
	if len(b) > MaxRecordBytes {
		return CalibrationSnapshot{}, &FieldError{Record: "calibration", Field: "value", Value: len(b),
			Reason: fmt.Sprintf("exceeds %d bytes", MaxRecordBytes), Err: ErrTooLarge}
	}
	le := binary.LittleEndian
	r := bytes.NewReader(b[len(snapMagic):])
	var err error
	// read fills v unless an earlier read failed; the first failure is kept.
	read := func(v any) {
		if err == nil {
			err = binary.Read(r, le, v)
		}
	}
	// str and count read a length; one beyond the bytes left is a truncation, never an
	// allocation.
	str := func() string {
		var n uint16
		read(&n)
		if err != nil || int(n) > r.Len() {
			err = cmp.Or(err, io.ErrUnexpectedEOF)
			return ""
		}
		v := make([]byte, n)
		read(v)
		return string(v)
	}
	count := func(size int) int {
		var n uint32
		read(&n)
		if err == nil && int64(n)*int64(size) > int64(r.Len()) {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0
		}
		return int(n)
	}
	s := CalibrationSnapshot{Schema: SchemaCalibrationV2}
	s.RunID, s.Stream, s.ConfigHash, s.Digest = str(), str(), str(), str()
	var f snapFixed
	read(&f)
	if bytes.HasPrefix(b, []byte(snapMagicDebias)) {
		var d snapDebias
		read(&d)
		s.Debias = &DebiasShift{Rows: int(d.Rows), Groups: int(d.Groups), Reordered: int(d.Reordered),
			Flattened: int(d.Flattened), MeanShift: d.MeanShift}
	}
	if n := count(16); n > 0 {
		s.BreakX, s.BreakY = make([]float64, n), make([]float64, n)
		read(s.BreakX)
		read(s.BreakY)
	}
	if n := count(1); n > 0 {
		s.State = make([]byte, n)
		read(s.State)
	}
	if err != nil {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: value ends early: %w", err))
	}
	if r.Len() > 0 {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: %d bytes after the state", r.Len()))
	}
	record := recordName("calibration", "run", s.RunID, "stream", s.Stream)
	if f.Pairs > math.MaxInt32 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "pairs", Value: f.Pairs, Reason: "out of range"}
	}
	if f.StepPairs > math.MaxInt32 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "step_pairs", Value: f.StepPairs, Reason: "out of range"}
	}
	if f.Nsec >= 1e9 {
		return CalibrationSnapshot{}, &FieldError{Record: record, Field: "created_at", Value: f.Nsec, Reason: "nanoseconds out of range"}
	}
	s.Step, s.FitVersion, s.Pairs, s.StepPairs = f.Step, f.FitVersion, int(f.Pairs), int(f.StepPairs)
	s.AnchorWeight, s.BiasBefore, s.BiasAfter = f.AnchorWeight, f.BiasBefore, f.BiasAfter
	s.CreatedAt = time.Unix(f.Sec, int64(f.Nsec)).UTC()
	return s, nil
}
