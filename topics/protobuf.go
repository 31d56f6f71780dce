package topics

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wmrl/wmrl/topics/wirepb"
)

// The Protobuf codecs (schemas/wmrl/v1, generated into topics/wirepb) return the same Go types
// and the same errors as the JSON ones: bytes protobuf cannot parse (including invalid UTF-8 in a
// string) are ErrMalformed with reason malformed-protobuf, and every decoded record goes through
// the same Validate as a JSON record, so ids, bounds and presence rules are checked once, in one
// place. What differs, on purpose:
//
//   - unknown fields are skipped, where JSON refuses unknown members. Binary records evolve by
//     adding fields (schemas/README.md), and a reader built before a field existed must pass over
//     it; a JSON record instead names its version in its `schema` member;
//   - the record carries no schema member: the message type, and in the Confluent framing the
//     registry schema id, say what it is. Decode sets Schema to the type's constant, encode
//     refuses any other (as JSON does), so decoded values are equal whichever format carried them;
//   - a missing created_at is the zero time in both formats; a zero time encodes as an absent one.

// protoMarshal is deterministic so equal records give equal bytes (map order of Rollout.Meta).
var protoMarshal = proto.MarshalOptions{Deterministic: true}

func encodeProto(v validator, m proto.Message) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	b, err := protoMarshal.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("encode %T: %d bytes exceeds the %d byte record limit: %w", v, len(b), MaxRecordBytes, ErrTooLarge)
	}
	return b, nil
}

// checkSize applies MaxRecordBytes to a binary record as decodeJSON does to a JSON one.
func checkSize(b []byte, kind string) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%s record: %d bytes exceeds the %d byte limit: %w", kind, len(b), MaxRecordBytes, ErrTooLarge)
	}
	return nil
}

func protoTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func goTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return time.Unix(ts.Seconds, int64(ts.Nanos)).UTC()
}

// schemaFor fills an empty schema with want; any other value is left for Validate to refuse.
func schemaFor(s *string, want string) {
	if *s == "" {
		*s = want
	}
}

// EncodeRolloutProto validates r and marshals it as a wmrl.v1.Rollout message.
func EncodeRolloutProto(r Rollout) ([]byte, error) {
	schemaFor(&r.Schema, SchemaRollout)
	return encodeProto(&r, &wirepb.Rollout{
		RunId: r.RunID, Step: r.Step, GroupId: r.GroupID, RolloutId: r.RolloutID, Stream: r.Stream,
		PolicyVersion: r.PolicyVersion, Anchor: r.Anchor, Index: int64(r.Index), Prompt: r.Prompt,
		Artifact: r.Artifact, ArtifactUri: r.ArtifactURI, ArtifactSha256: r.ArtifactSHA256,
		ArtifactSize: r.ArtifactSize, Meta: r.Meta, CreatedAt: protoTime(r.CreatedAt),
	})
}

// DecodeRolloutProto decodes and validates a wmrl.v1.Rollout message.
func DecodeRolloutProto(b []byte) (Rollout, error) {
	r := Rollout{Schema: SchemaRollout}
	if err := checkSize(b, "rollout"); err != nil {
		return Rollout{}, err
	}
	if err := wireRollout(b, &r); err != nil {
		return Rollout{}, err
	}
	if len(r.Meta) == 0 {
		r.Meta = nil
	}
	if err := r.Validate(); err != nil {
		return Rollout{}, err
	}
	return r, nil
}

// EncodeStepProto validates s and marshals it as a wmrl.v1.StepManifest message.
func EncodeStepProto(s StepManifest) ([]byte, error) {
	schemaFor(&s.Schema, SchemaStep)
	m := &wirepb.StepManifest{
		RunId: s.RunID, Step: s.Step, PolicyVersion: s.PolicyVersion, PolicyStep: s.PolicyStep,
		EndOfRun: s.EndOfRun, CreatedAt: protoTime(s.CreatedAt),
	}
	if s.Groups != nil {
		m.Groups = make([]*wirepb.GroupManifest, len(s.Groups))
		gs := make([]wirepb.GroupManifest, len(s.Groups))
		for i, g := range s.Groups {
			gs[i] = wirepb.GroupManifest{GroupId: g.GroupID, Stream: g.Stream, Size: int64(g.Size), Anchor: g.Anchor}
			m.Groups[i] = &gs[i]
		}
	}
	return encodeProto(&s, m)
}

// DecodeStepProto decodes and validates a wmrl.v1.StepManifest message. Its groups are nil when
// the message has none, as an end-of-run record's are in JSON.
func DecodeStepProto(b []byte) (StepManifest, error) {
	s := StepManifest{Schema: SchemaStep}
	if err := checkSize(b, "step"); err != nil {
		return StepManifest{}, err
	}
	if err := wireStep(b, &s); err != nil {
		return StepManifest{}, err
	}
	if err := s.Validate(); err != nil {
		return StepManifest{}, err
	}
	return s, nil
}

// EncodePredictedProto validates p and marshals it as a wmrl.v1.PredictedReward message.
func EncodePredictedProto(p PredictedReward) ([]byte, error) {
	schemaFor(&p.Schema, SchemaPredicted)
	return encodeProto(&p, &wirepb.PredictedReward{
		RunId: p.RunID, Step: p.Step, GroupId: p.GroupID, RolloutId: p.RolloutID, Stream: p.Stream,
		PolicyVersion: p.PolicyVersion, Anchor: p.Anchor, Score: p.Score, Status: string(p.Status),
		Reason: p.Reason, Model: p.Model, Attempts: int64(p.Attempts), LatencyMs: p.LatencyMS,
		CreatedAt: protoTime(p.CreatedAt),
	})
}

// DecodePredictedProto decodes and validates a wmrl.v1.PredictedReward message.
func DecodePredictedProto(b []byte) (PredictedReward, error) {
	p := PredictedReward{Schema: SchemaPredicted}
	if err := checkSize(b, "predicted"); err != nil {
		return PredictedReward{}, err
	}
	if err := wirePredicted(b, &p); err != nil {
		return PredictedReward{}, err
	}
	if err := p.Validate(); err != nil {
		return PredictedReward{}, err
	}
	return p, nil
}

// EncodeExecutedProto validates e and marshals it as a wmrl.v1.ExecutedReward message.
func EncodeExecutedProto(e ExecutedReward) ([]byte, error) {
	schemaFor(&e.Schema, SchemaExecuted)
	return encodeProto(&e, &wirepb.ExecutedReward{
		RunId: e.RunID, Step: e.Step, GroupId: e.GroupID, RolloutId: e.RolloutID, Stream: e.Stream,
		PolicyVersion: e.PolicyVersion, Score: e.Score, Imputed: e.Imputed, Status: string(e.Status),
		Reason: e.Reason, ExitCode: int64(e.ExitCode), DurationMs: e.DurationMS, StderrTail: e.StderrTail,
		CreatedAt: protoTime(e.CreatedAt),
	})
}

// DecodeExecutedProto decodes and validates a wmrl.v1.ExecutedReward message.
func DecodeExecutedProto(b []byte) (ExecutedReward, error) {
	e := ExecutedReward{Schema: SchemaExecuted}
	if err := checkSize(b, "executed"); err != nil {
		return ExecutedReward{}, err
	}
	if err := wireExecuted(b, &e); err != nil {
		return ExecutedReward{}, err
	}
	if err := e.Validate(); err != nil {
		return ExecutedReward{}, err
	}
	return e, nil
}
