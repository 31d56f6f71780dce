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

// snapMagic opens a binary calibration snapshot; its last byte is the layout's version, the one
// in SchemaCalibration. Earlier versions (JSON v1, binary layouts 2 and 3) only ever existed on
// development brokers and are refused as unknown (docs/compatibility.md).
const snapMagic = "WMRLCAL\x04"

// EncodeCalibration validates s and encodes it. An empty Schema becomes SchemaCalibration.
//
// Layout (little endian): magic[8] | run_id, stream, config_hash, settings, digest (u16 length +
// bytes) | step i64 | fit_version u64 | pairs u64 | step_pairs u64 | anchor_weight, bias_before,
// bias_after f64 | created_at unix seconds i64, nanoseconds u32 | blocks u8 (bit 0: debias,
// bit 1: gate; a snapshot without the gate writes 0 or 1 as before it existed), then with bit 0 the
// debias effect: rows, groups, reordered, flattened u32 | mean_shift f64, then with bit 1 the
// trust gate: closed u8 | pairs u32 | rho, lo, hi f64 | n u32,
// n×break_x f64, n×break_y f64 | state (u32 length + bytes). Nothing may follow.
func EncodeCalibration(s CalibrationSnapshot) ([]byte, error) {
	s.Schema = cmp.Or(s.Schema, SchemaCalibration)
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

// appendCalibration appends s's encoding to b without validating it (EncodeCalibration does).
func appendCalibration(b []byte, s *CalibrationSnapshot) []byte {
	le := binary.LittleEndian
	b = append(b, snapMagic...)
	for _, v := range []string{s.RunID, s.Stream, s.ConfigHash, s.Settings, s.Digest} {
		b = append(le.AppendUint16(b, uint16(len(v))), v...)
	}
	// binary.Append fails only for types without a fixed size; these all have one.
	b, _ = binary.Append(b, le, snapFixed{Step: s.Step, FitVersion: s.FitVersion,
		Pairs: uint64(s.Pairs), StepPairs: uint64(s.StepPairs),
		AnchorWeight: s.AnchorWeight, BiasBefore: s.BiasBefore, BiasAfter: s.BiasAfter,
		Sec: s.CreatedAt.Unix(), Nsec: uint32(s.CreatedAt.Nanosecond())})
	var blocks uint8
	if s.Debias != nil {
		blocks |= snapHasDebias
	}
	if s.Gate != nil {
		blocks |= snapHasGate
	}
	b = append(b, blocks)
	if d := s.Debias; d != nil {
		b, _ = binary.Append(b, le, snapDebias{Rows: uint32(d.Rows), Groups: uint32(d.Groups),
			Reordered: uint32(d.Reordered), Flattened: uint32(d.Flattened), MeanShift: d.MeanShift})
	}
	if g := s.Gate; g != nil {
		var closed uint8
		if g.Closed {
			closed = 1
		}
		b, _ = binary.Append(b, le, snapGate{Closed: closed, Pairs: uint32(g.Pairs), Rho: g.Rho, Lo: g.Lo, Hi: g.Hi})
	}
	b = le.AppendUint32(b, uint32(len(s.BreakX)))
	b, _ = binary.Append(b, le, s.BreakX)
	b, _ = binary.Append(b, le, s.BreakY)
	b = le.AppendUint32(b, uint32(len(s.State)))
	return append(b, s.State...)
}

// Bits of the blocks byte: which optional blocks follow the fixed part.
const (
	snapHasDebias uint8 = 1 << iota
	snapHasGate
)

// snapGate is the trust gate block (TrustGate on the wire).
type snapGate struct {
	Closed      uint8
	Pairs       uint32
	Rho, Lo, Hi float64
}

// snapDebias is the debias block (DebiasShift on the wire).
type snapDebias struct {
	Rows, Groups, Reordered, Flattened uint32
	MeanShift                          float64
}

// snapFixed is the fixed-width middle of the layout, read in one binary.Read.
type snapFixed struct {
	Step                                int64
	FitVersion, Pairs, StepPairs        uint64
	AnchorWeight, BiasBefore, BiasAfter float64
	Sec                                 int64
	Nsec                                uint32
}

// decodeCalibrationBinary decodes a snapshot; the caller validates it.
func decodeCalibrationBinary(b []byte) (CalibrationSnapshot, error) {
	if len(b) > MaxRecordBytes {
		return CalibrationSnapshot{}, &FieldError{Record: "calibration", Field: "value", Value: len(b),
			Reason: fmt.Sprintf("exceeds %d bytes", MaxRecordBytes), Err: ErrTooLarge}
	}
	if !bytes.HasPrefix(b, []byte(snapMagic)) {
		return CalibrationSnapshot{}, fmt.Errorf("calibration: not a %s snapshot (magic %q): %w", SchemaCalibration, b[:min(len(b), len(snapMagic))], ErrUnknownSchema)
	}
	r := &snapReader{r: bytes.NewReader(b[len(snapMagic):])}
	s := CalibrationSnapshot{Schema: SchemaCalibration}
	s.RunID, s.Stream, s.ConfigHash, s.Settings, s.Digest = r.str(), r.str(), r.str(), r.str(), r.str()
	var f snapFixed
	r.read(&f)
	if err := r.blocks(&s); err != nil {
		return CalibrationSnapshot{}, err
	}
	if n := r.count(16); n > 0 {
		s.BreakX, s.BreakY = make([]float64, n), make([]float64, n)
		r.read(s.BreakX)
		r.read(s.BreakY)
	}
	if n := r.count(1); n > 0 {
		s.State = make([]byte, n)
		r.read(s.State)
	}
	if r.err != nil {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: value ends early: %w", r.err))
	}
	if r.r.Len() > 0 {
		return CalibrationSnapshot{}, malformed("binary", fmt.Errorf("calibration: %d bytes after the state", r.r.Len()))
	}
	if err := f.into(&s); err != nil {
		return CalibrationSnapshot{}, err
	}
	return s, nil
}

// snapReader reads the binary snapshot layout. The first failure is kept and later reads do
// nothing, so a decoder reads a whole block and checks once.
type snapReader struct {
	r   *bytes.Reader
	err error
}

func (r *snapReader) read(v any) {
	if r.err == nil {
		r.err = binary.Read(r.r, binary.LittleEndian, v)
	}
}

// str and count read a length; one beyond the bytes left is a truncation, never an allocation.
func (r *snapReader) str() string {
	var n uint16
	r.read(&n)
	if r.err != nil || int(n) > r.r.Len() {
		r.err = cmp.Or(r.err, io.ErrUnexpectedEOF)
		return ""
	}
	v := make([]byte, n)
	r.read(v)
	return string(v)
}

func (r *snapReader) count(size int) int {
	var n uint32
	r.read(&n)
	if r.err == nil && int64(n)*int64(size) > int64(r.r.Len()) {
		r.err = io.ErrUnexpectedEOF
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// blocks reads the optional blocks (debias shift, trust gate) the blocks byte announces.
func (r *snapReader) blocks(s *CalibrationSnapshot) error {
	var blocks uint8
	r.read(&blocks)
	if r.err == nil && blocks&^(snapHasDebias|snapHasGate) != 0 {
		return malformed("binary", fmt.Errorf("calibration: blocks byte %d (want bits 0 and 1 only)", blocks))
	}
	if blocks&snapHasDebias != 0 {
		var d snapDebias
		r.read(&d)
		s.Debias = &DebiasShift{Rows: int(d.Rows), Groups: int(d.Groups), Reordered: int(d.Reordered),
			Flattened: int(d.Flattened), MeanShift: d.MeanShift}
	}
	if blocks&snapHasGate != 0 {
		var g snapGate
		r.read(&g)
		if r.err == nil && g.Closed > 1 {
			return malformed("binary", fmt.Errorf("calibration: gate closed byte %d (want 0 or 1)", g.Closed))
		}
		s.Gate = &TrustGate{Closed: g.Closed == 1, Pairs: int(g.Pairs), Rho: g.Rho, Lo: g.Lo, Hi: g.Hi}
	}
	return nil
}

// into range-checks the fixed fields and sets them on s (whose run and stream name the record).
func (f snapFixed) into(s *CalibrationSnapshot) error {
	record := recordName("calibration", "run", s.RunID, "stream", s.Stream)
	if f.Pairs > math.MaxInt32 {
		return &FieldError{Record: record, Field: "pairs", Value: f.Pairs, Reason: "out of range"}
	}
	if f.StepPairs > math.MaxInt32 {
		return &FieldError{Record: record, Field: "step_pairs", Value: f.StepPairs, Reason: "out of range"}
	}
	if f.Nsec >= 1e9 {
		return &FieldError{Record: record, Field: "created_at", Value: f.Nsec, Reason: "nanoseconds out of range"}
	}
	s.Step, s.FitVersion, s.Pairs, s.StepPairs = f.Step, f.FitVersion, int(f.Pairs), int(f.StepPairs)
	s.AnchorWeight, s.BiasBefore, s.BiasAfter = f.AnchorWeight, f.BiasBefore, f.BiasAfter
	s.CreatedAt = time.Unix(f.Sec, int64(f.Nsec)).UTC()
	return nil
}
