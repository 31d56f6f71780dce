package topics

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ContentTypeProtobufConfluent marks a record topic's Protobuf value in the Confluent wire format
// (magic byte 0, 4-byte schema id, message-index list, then the message), written when a schema
// registry is configured. The parameter keeps the rule "the content-type says how to decode":
// a reader strips the frame before the Protobuf decoder, which a bare application/x-protobuf
// value does not have.
const ContentTypeProtobufConfluent = ContentTypeProtobuf + "; framing=confluent"

// Framer frames and unframes record values in the Confluent wire format against a schema
// registry; topics/schemareg's Registry is the implementation. Names carries one (Names.Registry)
// so that the record builders frame and the Decode*Record readers check ids in one place.
type Framer interface {
	// FrameValue returns payload, a Protobuf message of topic's record type, behind the topic's
	// registered schema id and message index.
	FrameValue(topic string, payload []byte) ([]byte, error)
	// UnframeValue returns the Protobuf message of a framed value of topic after checking its
	// schema id belongs to topic's subject (ErrSchemaNotRegistered, ErrSchemaMismatch,
	// ErrMalformed otherwise). A registry it cannot reach is retried until ctx ends, so the only
	// other error is ctx's: never a reason to dead-letter the record.
	UnframeValue(ctx context.Context, topic string, value []byte) ([]byte, error)
	// FrameMessage is FrameValue for the message at index in topic's schema file, for a topic
	// that carries several messages (the calibration topic: snapshot, chunk, end) or whose
	// message index topics decides (advantages); framed_records.go lists the indexes.
	FrameMessage(topic string, index []int, payload []byte) ([]byte, error)
	// UnframeMessage is UnframeValue checking the frame's message index against index.
	UnframeMessage(ctx context.Context, topic string, index []int, value []byte) ([]byte, error)
}

// Framed reports whether n's record builders write topic Confluent-framed: a registry is set, the
// format is Protobuf and topic has a registered schema (rollouts, steps, the rewards, advantages
// and calibration; the run-control topic has none, docs/formats.md). Without a registry the
// advantages stay bare Arrow and the calibration records their binary layouts in every format.
func (n Names) Framed(topic string) bool {
	if n.Registry == nil || !n.Codec().binary() {
		return false
	}
	switch topic {
	case n.Rollouts(), n.Steps(), n.Predicted(), n.Executed(), n.Advantages(), n.Calibration():
		return true
	}
	return false
}

// frameMessage frames payload, the message at index of topic's schema file, when n frames topic
// (Framed): the value and content-type to write, else nil and "" (the caller writes its own
// layout).
func (n Names) frameMessage(topic string, index []int, payload func() ([]byte, error)) ([]byte, string, error) {
	if !n.Framed(topic) {
		return nil, "", nil
	}
	b, err := payload()
	if err != nil {
		return nil, "", err
	}
	v, err := n.Registry.FrameMessage(topic, index, b)
	if err != nil {
		return nil, "", err
	}
	return v, ContentTypeProtobufConfluent, nil
}

// messagePayload is payload for a topic whose records are not in n's record format (advantages,
// calibration): by r's content-type, the Protobuf message (proto true) of a bare or framed
// record, checking a frame's message index against index (and, with a registry, its id), or
// r.Value as it is (proto false: the topic's own layout, bare Arrow or binary).
func (n Names) messagePayload(ctx context.Context, r *kgo.Record, index []int) (b []byte, proto bool, err error) {
	ct, _ := HeaderValue(r.Headers, HeaderContentType)
	switch ct {
	case ContentTypeProtobuf:
		return r.Value, true, nil
	case ContentTypeProtobufConfluent:
		if n.Registry != nil {
			b, err := n.Registry.UnframeMessage(ctx, r.Topic, index, r.Value)
			return b, true, err
		}
		got, b, err := skipFrameIndex(r.Value)
		if err != nil {
			return nil, true, fmt.Errorf("%s: %w", r.Topic, err)
		}
		if !EqualMessageIndex(got, index) {
			return nil, true, fmt.Errorf("%s: message index %v, want %v: %w", r.Topic, got, index, ErrSchemaMismatch)
		}
		return b, true, nil
	}
	return r.Value, false, nil
}

// EqualMessageIndex compares Confluent message indexes; an empty list is [0] (the wire format's
// shorthand).
func EqualMessageIndex(got, want []int) bool {
	if len(got) == 0 {
		got = []int{0}
	}
	if len(want) == 0 {
		want = []int{0}
	}
	return slices.Equal(got, want)
}

// payload returns the bytes the codec of r's RecordFormat decodes: r.Value, or, for a framed
// record, the message behind the frame. Without a registry the frame is skipped unchecked (the
// payload is a complete message; the id check is the registry's to make).
func (n Names) payload(ctx context.Context, r *kgo.Record) (Format, []byte, error) {
	ct, _ := HeaderValue(r.Headers, HeaderContentType)
	switch ct {
	case ContentTypeProtobuf:
		return FormatProtobuf, r.Value, nil
	case ContentTypeProtobufConfluent:
		if n.Registry != nil {
			b, err := n.Registry.UnframeValue(ctx, r.Topic, r.Value)
			return FormatProtobuf, b, err
		}
		b, err := skipFrame(r.Value)
		if err != nil {
			return FormatProtobuf, nil, fmt.Errorf("%s: %w", r.Topic, err)
		}
		return FormatProtobuf, b, nil
	}
	return FormatJSON, r.Value, nil
}

// skipFrame returns what follows a Confluent Protobuf frame: magic byte 0, 4-byte id, then the
// message-index list (zig-zag varints: a count, then the indexes; a count of 0 is [0]).
func skipFrame(b []byte) ([]byte, error) {
	_, b, err := skipFrameIndex(b)
	return b, err
}

// skipFrameIndex is skipFrame also returning the message-index list (nil for the shorthand [0]).
func skipFrameIndex(b []byte) ([]int, []byte, error) {
	if len(b) < 5 || b[0] != 0 {
		return nil, nil, fmt.Errorf("%w: not a Confluent frame (want magic byte 0 and a 4-byte schema id)", ErrMalformed)
	}
	b = b[5:]
	count, b, err := frameVarint(b)
	if err != nil {
		return nil, nil, err
	}
	if count < 0 || count > 8 {
		return nil, nil, fmt.Errorf("%w: Confluent frame: message-index count %d", ErrMalformed, count)
	}
	var index []int
	for range count {
		var i int64
		if i, b, err = frameVarint(b); err != nil {
			return nil, nil, err
		}
		index = append(index, int(i))
	}
	return index, b, nil
}

func frameVarint(b []byte) (int64, []byte, error) {
	var u uint64
	for i := 0; i < len(b) && i < 10; i++ {
		u |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return int64(u>>1) ^ -int64(u&1), b[i+1:], nil
		}
	}
	return 0, nil, fmt.Errorf("%w: Confluent frame: truncated message index", ErrMalformed)
}

// DecodeRolloutRecord decodes a rollouts-topic record by its content-type (unframing a framed
// one, checked against n's registry).
func (n Names) DecodeRolloutRecord(ctx context.Context, r *kgo.Record) (Rollout, error) {
	f, b, err := n.payload(ctx, r)
	if err != nil {
		return Rollout{}, err
	}
	return CodecFor(f).DecodeRollout(b)
}

// DecodeStepRecord decodes a steps- or runs-topic record by its content-type.
func (n Names) DecodeStepRecord(ctx context.Context, r *kgo.Record) (StepManifest, error) {
	f, b, err := n.payload(ctx, r)
	if err != nil {
		return StepManifest{}, err
	}
	return CodecFor(f).DecodeStep(b)
}

// DecodePredictedRecord decodes a rewards.predicted record by its content-type.
func (n Names) DecodePredictedRecord(ctx context.Context, r *kgo.Record) (PredictedReward, error) {
	f, b, err := n.payload(ctx, r)
	if err != nil {
		return PredictedReward{}, err
	}
	return CodecFor(f).DecodePredicted(b)
}

// DecodeExecutedRecord decodes a rewards.executed record by its content-type.
func (n Names) DecodeExecutedRecord(ctx context.Context, r *kgo.Record) (ExecutedReward, error) {
	f, b, err := n.payload(ctx, r)
	if err != nil {
		return ExecutedReward{}, err
	}
	return CodecFor(f).DecodeExecuted(b)
}
