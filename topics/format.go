package topics

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Format is the wire format of the record topics (rollouts, steps, rewards). Advantages stay Arrow
// IPC and the calibration topic its binary layout in every format (docs/formats.md).
type Format string

const (
	// FormatJSON is the default: self-describing records with a `schema` member, readable
	// without a schema registry.
	FormatJSON Format = "json"
	// FormatProtobuf is the schemas/wmrl/v1 messages (docs/formats.md has the trial that chose it).
	FormatProtobuf Format = "protobuf"
)

// Formats lists the formats ParseFormat accepts, for flag help.
var Formats = []Format{FormatJSON, FormatProtobuf}

// ParseFormat parses a --format value; the empty string is FormatJSON.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", FormatJSON:
		return FormatJSON, nil
	case FormatProtobuf:
		return FormatProtobuf, nil
	}
	return "", fmt.Errorf("format %q: want one of %v", s, Formats)
}

// String returns the flag value.
func (f Format) String() string { return string(f) }

// Set implements flag.Value and pflag.Value.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// Codec encodes and decodes the record topics in one format. It is the one place that picks the
// codec per topic: stages hold a Codec built from their --format and call it instead of the
// package-level JSON functions. The zero Codec is JSON.
type Codec struct {
	Format Format
}

// CodecFor returns the codec of f.
func CodecFor(f Format) Codec { return Codec{Format: f} }

func (c Codec) binary() bool { return c.Format == FormatProtobuf }

// EncodeRollout encodes r in c's format.
func (c Codec) EncodeRollout(r Rollout) ([]byte, error) {
	if c.binary() {
		return EncodeRolloutProto(r)
	}
	return EncodeRollout(r)
}

// DecodeRollout decodes a rollout in c's format.
func (c Codec) DecodeRollout(b []byte) (Rollout, error) {
	if c.binary() {
		return DecodeRolloutProto(b)
	}
	return DecodeRollout(b)
}

// EncodeStep encodes m in c's format.
func (c Codec) EncodeStep(m StepManifest) ([]byte, error) {
	if c.binary() {
		return EncodeStepProto(m)
	}
	return EncodeStep(m)
}

// DecodeStep decodes a step manifest in c's format.
func (c Codec) DecodeStep(b []byte) (StepManifest, error) {
	if c.binary() {
		return DecodeStepProto(b)
	}
	return DecodeStep(b)
}

// EncodePredicted encodes p in c's format.
func (c Codec) EncodePredicted(p PredictedReward) ([]byte, error) {
	if c.binary() {
		return EncodePredictedProto(p)
	}
	return EncodePredicted(p)
}

// DecodePredicted decodes a world-model reward in c's format.
func (c Codec) DecodePredicted(b []byte) (PredictedReward, error) {
	if c.binary() {
		return DecodePredictedProto(b)
	}
	return DecodePredicted(b)
}

// EncodeExecuted encodes e in c's format.
func (c Codec) EncodeExecuted(e ExecutedReward) ([]byte, error) {
	if c.binary() {
		return EncodeExecutedProto(e)
	}
	return EncodeExecuted(e)
}

// DecodeExecuted decodes a sandbox reward in c's format.
func (c Codec) DecodeExecuted(b []byte) (ExecutedReward, error) {
	if c.binary() {
		return DecodeExecutedProto(b)
	}
	return DecodeExecuted(b)
}

// Type implements pflag.Value.
func (f *Format) Type() string { return "format" }

// RecordFormat is the format a record's content-type header names: FormatProtobuf for
// ContentTypeProtobuf and ContentTypeProtobufConfluent, FormatJSON otherwise (records written
// before formats existed carry application/json or nothing). Readers decode by it, not by their
// own --format, so a pipeline can move from one format to the other stage by stage, and JSON
// writers (the Python client) keep working beside binary ones.
func RecordFormat(r *kgo.Record) Format {
	switch ct, _ := lastHeader(r.Headers, HeaderContentType); string(ct) {
	case ContentTypeProtobuf, ContentTypeProtobufConfluent:
		return FormatProtobuf
	}
	return FormatJSON
}

// DecodeRolloutRecord decodes a rollouts-topic record by its content-type, a framed one unchecked
// (no registry: Names.DecodeRolloutRecord is the stages' reader).
func DecodeRolloutRecord(r *kgo.Record) (Rollout, error) {
	return Names{}.DecodeRolloutRecord(context.Background(), r)
}

// DecodeStepRecord decodes a steps- or runs-topic record by its content-type (no registry).
func DecodeStepRecord(r *kgo.Record) (StepManifest, error) {
	return Names{}.DecodeStepRecord(context.Background(), r)
}

// DecodePredictedRecord decodes a rewards.predicted record by its content-type (no registry).
func DecodePredictedRecord(r *kgo.Record) (PredictedReward, error) {
	return Names{}.DecodePredictedRecord(context.Background(), r)
}

// DecodeExecutedRecord decodes a rewards.executed record by its content-type (no registry).
func DecodeExecutedRecord(r *kgo.Record) (ExecutedReward, error) {
	return Names{}.DecodeExecutedRecord(context.Background(), r)
}
