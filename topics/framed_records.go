package topics

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics/wirepb"
)

// Confluent message indexes of the advantages and calibration topics' messages: their position
// in advantages.proto and calibration.proto (declaration order, DebiasShift being index 1). A
// registry reader picks the message by this index; wmrl's readers pick it by the record's key and
// check the index agrees.
var (
	indexAdvantageBatch      = []int{0}
	indexCalibrationSnapshot = []int{0}
	indexCalibrationChunk    = []int{2}
	indexCalibrationEnd      = []int{3}
)

// The readers below are the one content-type switch of the advantages and calibration topics:
// a bare record (application/vnd.apache.arrow.stream, application/octet-stream, or no
// content-type) is decoded in its own layout as always; application/x-protobuf is the topic's
// Protobuf message; application/x-protobuf; framing=confluent is unframed first (the id checked
// against n.Registry when one is set, the message index always), then decoded as Protobuf.

// AdvantageArrow returns the Arrow IPC stream of an advantages record, by its content-type: the
// value itself, or the arrow_ipc of its wmrl.v1.AdvantageBatch (whose schema must be an
// advantages schema). For readers that take the Arrow bytes as they are (the analytics tap);
// DecodeAdvantageRecord decodes the rows.
func (n Names) AdvantageArrow(ctx context.Context, r *kgo.Record) ([]byte, error) {
	b, proto, err := n.messagePayload(ctx, r, indexAdvantageBatch)
	if err != nil || !proto {
		return b, err
	}
	m, err := unmarshalAdvantageBatch(b)
	if err != nil {
		return nil, err
	}
	return m.ArrowIpc, nil
}

// DecodeAdvantageRecord decodes an advantages record's rows by its content-type (DecodeAdvantages
// or DecodeAdvantagesProto behind an optional frame).
func (n Names) DecodeAdvantageRecord(ctx context.Context, r *kgo.Record) ([]AdvantageRow, error) {
	b, proto, err := n.messagePayload(ctx, r, indexAdvantageBatch)
	if err != nil {
		return nil, err
	}
	if proto {
		return DecodeAdvantagesProto(b)
	}
	return DecodeAdvantages(b)
}

// DecodeCalibrationRecord decodes a calibration snapshot record (key run_id/stream) by its
// content-type; the caller checks the key.
func (n Names) DecodeCalibrationRecord(ctx context.Context, r *kgo.Record) (CalibrationSnapshot, error) {
	b, proto, err := n.messagePayload(ctx, r, indexCalibrationSnapshot)
	if err != nil {
		return CalibrationSnapshot{}, err
	}
	if proto {
		return DecodeCalibrationProto(b)
	}
	return DecodeCalibration(b)
}

// DecodeCalibrationChunkRecord decodes a window chunk record (key run_id/stream/slot) by its
// content-type, with DecodeCalibrationChunk's key checks.
func (n Names) DecodeCalibrationChunkRecord(ctx context.Context, r *kgo.Record, chunkPairs uint64) (CalibrationChunk, error) {
	b, proto, err := n.messagePayload(ctx, r, indexCalibrationChunk)
	if err != nil {
		return CalibrationChunk{}, fmt.Errorf("calibration chunk %s: %w", r.Key, err)
	}
	if proto {
		return decodeKeyedChunk(r.Key, b, chunkPairs, DecodeCalibrationChunkValueProto)
	}
	return DecodeCalibrationChunk(r.Key, b, chunkPairs)
}

// DecodeCalibrationEndRecord decodes a run's end record (key run_id) by its content-type; the
// caller checks the key.
func (n Names) DecodeCalibrationEndRecord(ctx context.Context, r *kgo.Record) (CalibrationEnd, error) {
	b, proto, err := n.messagePayload(ctx, r, indexCalibrationEnd)
	if err != nil {
		return CalibrationEnd{}, err
	}
	if proto {
		return DecodeCalibrationEndProto(b)
	}
	return DecodeCalibrationEnd(b)
}

// setContentType overwrites the content-type Headers put second.
func setContentType(r *kgo.Record, ct string) {
	if ct != "" {
		r.Headers[1].Value = []byte(ct)
	}
}

// unmarshalAdvantageBatch decodes a wmrl.v1.AdvantageBatch, bounded by the Arrow payload's own
// limit (it may exceed MaxRecordBytes, as a bare Arrow chunk may) and checking its schema names
// an advantages layout.
func unmarshalAdvantageBatch(b []byte) (*wirepb.AdvantageBatch, error) {
	// The wrapper adds the schema string and two field tags to the Arrow bytes.
	if len(b) > MaxAdvantageBytes+1024 {
		return nil, fmt.Errorf("advantages: %d bytes exceeds the %d byte limit: %w", len(b), MaxAdvantageBytes, ErrTooLarge)
	}
	var m wirepb.AdvantageBatch
	if err := protoUnmarshal.Unmarshal(b, &m); err != nil {
		return nil, malformed("protobuf", fmt.Errorf("advantages record: %w", err))
	}
	if !IsAdvantageSchema(m.Schema) {
		return nil, &FieldError{Record: "advantages", Field: "schema", Value: m.Schema, Reason: "not an advantages schema", Err: ErrUnknownSchema}
	}
	return &m, nil
}

// DecodeAdvantageRecord is Names.DecodeAdvantageRecord without a registry (a framed record's id
// unchecked), for readers that hold none (the dashboard, trainers, tools).
func DecodeAdvantageRecord(r *kgo.Record) ([]AdvantageRow, error) {
	return Names{}.DecodeAdvantageRecord(context.Background(), r)
}

// DecodeCalibrationRecord is Names.DecodeCalibrationRecord without a registry.
func DecodeCalibrationRecord(r *kgo.Record) (CalibrationSnapshot, error) {
	return Names{}.DecodeCalibrationRecord(context.Background(), r)
}

// DecodeCalibrationEndRecord is Names.DecodeCalibrationEndRecord without a registry.
func DecodeCalibrationEndRecord(r *kgo.Record) (CalibrationEnd, error) {
	return Names{}.DecodeCalibrationEndRecord(context.Background(), r)
}
