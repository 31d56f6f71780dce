package topics

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wmrl/wmrl/topics/wirepb"
)

// protoCase is one record type's Protobuf codec, its generated message (the oracle) and a
// conversion from the generated message to the topics type, written once here in the obvious way.
type protoCase struct {
	name    string
	samples []any
	enc     func(any) ([]byte, error)
	dec     func([]byte) (any, error)
	msg     func() proto.Message
	conv    func(proto.Message) any
}

func tsTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func protoCases() []protoCase {
	return []protoCase{
		{"rollout", []any{sampleRollout(), Rollout{Schema: SchemaRollout, RunID: "r", GroupID: "g", RolloutID: "x", Stream: "s"}},
			func(v any) ([]byte, error) { return EncodeRolloutProto(v.(Rollout)) },
			func(b []byte) (any, error) { return DecodeRolloutProto(b) },
			func() proto.Message { return &wirepb.Rollout{} },
			func(p proto.Message) any {
				m := p.(*wirepb.Rollout)
				r := Rollout{Schema: SchemaRollout, RunID: m.RunId, Step: m.Step, GroupID: m.GroupId, RolloutID: m.RolloutId,
					Stream: m.Stream, PolicyVersion: m.PolicyVersion, Anchor: m.Anchor, Index: int(m.Index), Prompt: m.Prompt,
					Artifact: m.Artifact, ArtifactURI: m.ArtifactUri, ArtifactSHA256: m.ArtifactSha256, ArtifactSize: m.ArtifactSize,
					Meta: m.Meta, CreatedAt: tsTime(m.CreatedAt)}
				if len(r.Meta) == 0 {
					r.Meta = nil
				}
				return r
			}},
		{"step", []any{sampleStep(), sampleStepPolicyStep(), sampleStepEnd()},
			func(v any) ([]byte, error) { return EncodeStepProto(v.(StepManifest)) },
			func(b []byte) (any, error) { return DecodeStepProto(b) },
			func() proto.Message { return &wirepb.StepManifest{} },
			func(p proto.Message) any {
				m := p.(*wirepb.StepManifest)
				s := StepManifest{Schema: SchemaStep, RunID: m.RunId, Step: m.Step, PolicyVersion: m.PolicyVersion,
					PolicyStep: m.PolicyStep, EndOfRun: m.EndOfRun, CreatedAt: tsTime(m.CreatedAt)}
				for _, g := range m.Groups {
					s.Groups = append(s.Groups, GroupManifest{GroupID: g.GroupId, Stream: g.Stream, Size: int(g.Size), Anchor: g.Anchor})
				}
				return s
			}},
		{"predicted", []any{samplePredicted()},
			func(v any) ([]byte, error) { return EncodePredictedProto(v.(PredictedReward)) },
			func(b []byte) (any, error) { return DecodePredictedProto(b) },
			func() proto.Message { return &wirepb.PredictedReward{} },
			func(p proto.Message) any {
				m := p.(*wirepb.PredictedReward)
				return PredictedReward{Schema: SchemaPredicted, RolloutRef: RolloutRef{RunID: m.RunId, Step: m.Step, GroupID: m.GroupId,
					RolloutID: m.RolloutId, Stream: m.Stream, PolicyVersion: m.PolicyVersion}, Anchor: m.Anchor, Score: m.Score,
					Status: Status(m.Status), Reason: m.Reason, Model: m.Model, Attempts: int(m.Attempts), LatencyMS: m.LatencyMs,
					CreatedAt: tsTime(m.CreatedAt)}
			}},
		{"executed", []any{sampleExecuted(), sampleImputed()},
			func(v any) ([]byte, error) { return EncodeExecutedProto(v.(ExecutedReward)) },
			func(b []byte) (any, error) { return DecodeExecutedProto(b) },
			func() proto.Message { return &wirepb.ExecutedReward{} },
			func(p proto.Message) any {
				m := p.(*wirepb.ExecutedReward)
				return ExecutedReward{Schema: SchemaExecuted, RolloutRef: RolloutRef{RunID: m.RunId, Step: m.Step, GroupID: m.GroupId,
					RolloutID: m.RolloutId, Stream: m.Stream, PolicyVersion: m.PolicyVersion}, Score: m.Score, Imputed: m.Imputed,
					Status: Status(m.Status), Reason: m.Reason, ExitCode: int(m.ExitCode), DurationMS: m.DurationMs,
					StderrTail: m.StderrTail, CreatedAt: tsTime(m.CreatedAt)}
			}},
	}
}

// TestProtoRoundTrip: every sample decodes to itself, through Protobuf as through JSON, so stages
// see equal values whichever format carried them.
func TestProtoRoundTrip(t *testing.T) {
	for _, c := range protoCases() {
		for i, v := range c.samples {
			b, err := c.enc(v)
			if err != nil {
				t.Fatalf("%s[%d]: encode: %v", c.name, i, err)
			}
			got, err := c.dec(b)
			if err != nil {
				t.Fatalf("%s[%d]: decode: %v", c.name, i, err)
			}
			if !reflect.DeepEqual(got, v) {
				t.Errorf("%s[%d]: round trip\n got %+v\nwant %+v", c.name, i, got, v)
			}
		}
	}
}

// TestProtoWireMatchesGenerated holds the protowire decoders to the generated code on the samples
// and on the samples with a field appended that this schema does not know (a newer writer's).
func TestProtoWireMatchesGenerated(t *testing.T) {
	for _, c := range protoCases() {
		for i, v := range c.samples {
			b, err := c.enc(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range [][]byte{b, appendUnknownField(b)} {
				checkAgainstGenerated(t, c, in)
			}
			if t.Failed() {
				t.Fatalf("%s[%d]", c.name, i)
			}
		}
	}
}

// appendUnknownField appends field 99 (a string and a varint) as a newer schema would write it.
func appendUnknownField(b []byte) []byte {
	out := append([]byte(nil), b...)
	out = protowire.AppendTag(out, 99, protowire.BytesType)
	out = protowire.AppendString(out, "a field from a newer schema")
	out = protowire.AppendTag(out, 100, protowire.VarintType)
	return protowire.AppendVarint(out, 7)
}

// checkAgainstGenerated: whatever the protowire decoder accepts, the generated code accepts and
// decodes to the same value.
func checkAgainstGenerated(t *testing.T, c protoCase, b []byte) {
	t.Helper()
	got, err := c.dec(b)
	if err != nil {
		return
	}
	m := c.msg()
	if err := proto.Unmarshal(b, m); err != nil {
		t.Errorf("%s: protowire accepted %x, generated code refused it: %v", c.name, b, err)
		return
	}
	if want := c.conv(m); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %x\nprotowire %+v\ngenerated %+v", c.name, b, got, want)
	}
}

// TestProtoDecodeErrors: bad bytes are malformed, bad fields are named, and invalid values fail
// the same validation as in JSON.
func TestProtoDecodeErrors(t *testing.T) {
	good, err := EncodePredictedProto(samplePredicted())
	if err != nil {
		t.Fatal(err)
	}
	badScore := samplePredicted()
	badScore.Score = ptr(1.5)
	m := &wirepb.PredictedReward{RunId: "r1", GroupId: "g3", RolloutId: "g3-r2", Stream: "mle", Score: badScore.Score, Status: "ok"}
	outOfRange, _ := proto.Marshal(m)
	m.RunId = "r1/x"
	badID, _ := proto.Marshal(m)
	wrongType := protowire.AppendTag(nil, 8, protowire.VarintType) // score as a varint
	wrongType = protowire.AppendVarint(wrongType, 1)
	badUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, []byte{0xff, 'r'})
	for _, c := range []struct {
		name   string
		in     []byte
		reason string
		is     error
	}{
		{"truncated", good[:len(good)-3], "invalid-field:created_at", ErrMalformed},
		{"bad tag", []byte{0x80}, "malformed-protobuf", ErrMalformed},
		{"not protobuf", []byte(`{"schema":"wmrl.reward.predicted.v1"}`), "malformed-protobuf", ErrMalformed},
		{"score out of range", outOfRange, "invalid-field:score", ErrInvalid},
		{"bad run id", badID, "invalid-field:run_id", ErrInvalid},
		{"wrong wire type", wrongType, "invalid-field:score", ErrMalformed},
		{"invalid UTF-8", badUTF8, "invalid-field:run_id", ErrMalformed},
		{"too large", make([]byte, MaxRecordBytes+1), "too-large", ErrTooLarge},
	} {
		_, err := DecodePredictedProto(c.in)
		if err == nil || Reason(err) != c.reason || !errors.Is(err, c.is) {
			t.Errorf("%s: err %v, reason %q; want reason %q, errors.Is %v", c.name, err, Reason(err), c.reason, c.is)
		}
	}
}

// TestCodecFormats: the Codec picks the format, and a record written in one format is refused by
// the other's decoder (never misread).
func TestCodecFormats(t *testing.T) {
	for _, f := range Formats {
		c := CodecFor(f)
		b, err := c.EncodePredicted(samplePredicted())
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.DecodePredicted(b)
		if err != nil || !reflect.DeepEqual(got, samplePredicted()) {
			t.Errorf("%s: %+v, %v", f, got, err)
		}
		other := CodecFor(FormatJSON)
		if f == FormatJSON {
			other = CodecFor(FormatProtobuf)
		}
		if _, err := other.DecodePredicted(b); err == nil {
			t.Errorf("%s bytes decoded as %s", f, other.Format)
		}
	}
	if _, err := ParseFormat("avro"); err == nil {
		t.Error("ParseFormat(avro) succeeded")
	}
}

// TestProtoRepeatedMessageFieldMerges: an embedded message that occurs twice is merged, as the
// generated code merges it (seconds from the first, nanos from the second).
func TestProtoRepeatedMessageFieldMerges(t *testing.T) {
	c := protoCases()[2] // predicted
	b := mustEnc(t, c, samplePredicted())
	ts := protowire.AppendTag(nil, 2, protowire.VarintType)
	ts = protowire.AppendVarint(ts, 7)
	b = protowire.AppendTag(b, 14, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	checkAgainstGenerated(t, c, b)
	got, err := DecodePredictedProto(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(7 * time.Nanosecond); !got.CreatedAt.Equal(want) {
		t.Errorf("created_at %v, want %v", got.CreatedAt, want)
	}
}
