package topics

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/wmrl/wmrl/topics/wirepb"
)

// Protobuf codecs of the calibration topic's three records and of the advantages wrapper
// (schemas/wmrl/v1/calibration.proto, advantages.proto). These records are few (one per sealed
// step and stream, one per run), so they go through the generated messages; the validation is the
// same as for the binary layouts. The stages write them, Confluent-framed, when a schema registry
// is set (Names.Framed); without one the topics keep bare Arrow and the binary layouts
// (docs/formats.md). framed_records.go holds the readers' content-type switch.

// protoUnmarshal skips unknown fields (a newer schema's) and does not keep them: nothing
// re-encodes a decoded message.
var protoUnmarshal = proto.UnmarshalOptions{DiscardUnknown: true}

func unmarshalProto(b []byte, kind string, m proto.Message) error {
	if err := checkSize(b, kind); err != nil {
		return err
	}
	if err := protoUnmarshal.Unmarshal(b, m); err != nil {
		return malformed("protobuf", fmt.Errorf("%s record: %w", kind, err))
	}
	return nil
}

// EncodeCalibrationProto validates s and marshals it as a wmrl.v1.CalibrationSnapshot message.
func EncodeCalibrationProto(s CalibrationSnapshot) ([]byte, error) {
	schemaFor(&s.Schema, SchemaCalibration)
	m := &wirepb.CalibrationSnapshot{
		RunId: s.RunID, Stream: s.Stream, Step: s.Step, FitVersion: s.FitVersion, Pairs: int64(s.Pairs),
		ConfigHash: s.ConfigHash, Settings: s.Settings, Digest: s.Digest, State: s.State, BreakX: s.BreakX,
		BreakY: s.BreakY, AnchorWeight: s.AnchorWeight, BiasBefore: s.BiasBefore, BiasAfter: s.BiasAfter,
		StepPairs: int64(s.StepPairs), CreatedAt: protoTime(s.CreatedAt),
	}
	if d := s.Debias; d != nil {
		m.Debias = &wirepb.DebiasShift{Rows: int64(d.Rows), Groups: int64(d.Groups), Reordered: int64(d.Reordered),
			Flattened: int64(d.Flattened), MeanShift: d.MeanShift}
	}
	return encodeProto(&s, m)
}

// DecodeCalibrationProto decodes and validates a wmrl.v1.CalibrationSnapshot message, with
// DecodeCalibration's normalisation (empty breakpoints and state are nil).
func DecodeCalibrationProto(b []byte) (CalibrationSnapshot, error) {
	var m wirepb.CalibrationSnapshot
	if err := unmarshalProto(b, "calibration", &m); err != nil {
		return CalibrationSnapshot{}, err
	}
	s := CalibrationSnapshot{
		Schema: SchemaCalibration, RunID: m.RunId, Stream: m.Stream, Step: m.Step, FitVersion: m.FitVersion,
		Pairs: int(m.Pairs), ConfigHash: m.ConfigHash, Settings: m.Settings, Digest: m.Digest, State: m.State,
		BreakX: m.BreakX, BreakY: m.BreakY, AnchorWeight: m.AnchorWeight, BiasBefore: m.BiasBefore,
		BiasAfter: m.BiasAfter, StepPairs: int(m.StepPairs), CreatedAt: goTime(m.CreatedAt),
	}
	if d := m.Debias; d != nil {
		s.Debias = &DebiasShift{Rows: int(d.Rows), Groups: int(d.Groups), Reordered: int(d.Reordered),
			Flattened: int(d.Flattened), MeanShift: d.MeanShift}
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

// EncodeCalibrationChunkProto marshals c's value as a wmrl.v1.CalibrationChunk message (the key
// carries run and stream, as in the binary layout).
func EncodeCalibrationChunkProto(c CalibrationChunk) ([]byte, error) {
	return protoMarshal.Marshal(&wirepb.CalibrationChunk{Slot: int64(c.Slot), Step: c.Step, Chunk: c.Chunk, First: c.First, Pairs: c.Pairs})
}

// DecodeCalibrationChunkValueProto is DecodeCalibrationChunkValue for a wmrl.v1.CalibrationChunk.
func DecodeCalibrationChunkValueProto(value []byte, chunkPairs uint64) (CalibrationChunk, error) {
	var m wirepb.CalibrationChunk
	if err := unmarshalProto(value, "calibration chunk", &m); err != nil {
		return CalibrationChunk{}, err
	}
	if m.Slot < 0 || m.Slot > 1<<32-1 {
		return CalibrationChunk{}, &FieldError{Record: "calibration chunk", Field: "slot", Value: m.Slot, Reason: "out of range"}
	}
	return checkChunk(CalibrationChunk{Slot: int(m.Slot), Step: m.Step, Chunk: m.Chunk, First: m.First, Pairs: m.Pairs}, chunkPairs)
}

// EncodeCalibrationEndProto validates e and marshals it as a wmrl.v1.CalibrationEnd message.
func EncodeCalibrationEndProto(e CalibrationEnd) ([]byte, error) {
	return encodeProto(&e, &wirepb.CalibrationEnd{RunId: e.RunID, LastStep: e.LastStep, EndedAt: protoTime(e.EndedAt), Reason: e.Reason})
}

// DecodeCalibrationEndProto decodes and validates a wmrl.v1.CalibrationEnd message.
func DecodeCalibrationEndProto(b []byte) (CalibrationEnd, error) {
	var m wirepb.CalibrationEnd
	if err := unmarshalProto(b, "calibration end", &m); err != nil {
		return CalibrationEnd{}, err
	}
	e := CalibrationEnd{RunID: m.RunId, LastStep: m.LastStep, EndedAt: goTime(m.EndedAt), Reason: m.Reason}
	if err := e.Validate(); err != nil {
		return CalibrationEnd{}, err
	}
	return e, nil
}

// EncodeAdvantagesProto wraps one Arrow IPC chunk (ChunkAdvantages' output) in a
// wmrl.v1.AdvantageBatch with its schema id, for a registry reader; the rows stay Arrow.
func EncodeAdvantagesProto(arrowIPC []byte, schema string) ([]byte, error) {
	if !IsAdvantageSchema(schema) {
		return nil, &FieldError{Record: "advantages", Field: "schema", Value: schema, Reason: "not an advantages schema", Err: ErrUnknownSchema}
	}
	return protoMarshal.Marshal(&wirepb.AdvantageBatch{Schema: schema, ArrowIpc: arrowIPC})
}

// DecodeAdvantagesProto unwraps a wmrl.v1.AdvantageBatch and decodes its Arrow rows
// (DecodeAdvantages); the wrapper's schema must be the one the Arrow stream declares.
func DecodeAdvantagesProto(b []byte) ([]AdvantageRow, error) {
	m, err := unmarshalAdvantageBatch(b)
	if err != nil {
		return nil, err
	}
	rows, err := DecodeAdvantages(m.ArrowIpc)
	if err != nil {
		return nil, err
	}
	if got := AdvantageSchemaID(rows); len(rows) > 0 && got != m.Schema && !(m.Schema == SchemaAdvantagesV2 && got == SchemaAdvantages) {
		return nil, &FieldError{Record: "advantages", Field: "schema", Value: m.Schema, Reason: fmt.Sprintf("the Arrow rows are %s", got), Err: ErrConflict}
	}
	return rows, nil
}
