package schemareg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// recordIndex is the Confluent message index of each framed topic's record message in its schema
// file (step.proto declares GroupManifest first, so StepManifest is [1]).
var recordIndex = map[string][]int{
	topics.SuffixRollouts:  {0},
	topics.SuffixSteps:     {1},
	topics.SuffixPredicted: {0},
	topics.SuffixExecuted:  {0},
}

// index returns the message index of topic's record message.
func (r *Registry) index(topic string) ([]int, error) {
	for suffix, idx := range recordIndex {
		if strings.HasSuffix(topic, suffix) {
			return idx, nil
		}
	}
	return nil, fmt.Errorf("schemareg: topic %s: no record message to frame", topic)
}

// FrameValue implements topics.Framer: payload behind topic's registered id and its record
// message's index.
func (r *Registry) FrameValue(topic string, payload []byte) ([]byte, error) {
	idx, err := r.index(topic)
	if err != nil {
		return nil, err
	}
	return r.FrameMessage(topic, idx, payload)
}

// FrameMessage implements topics.Framer: payload behind topic's registered id and index (the
// advantages and calibration topics, whose message index topics decides).
func (r *Registry) FrameMessage(topic string, index []int, payload []byte) ([]byte, error) {
	return r.AppendFrame(make([]byte, 0, len(payload)+8), topic, index, payload)
}

// Retry pacing of UnframeValue while the registry cannot be reached.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// UnframeValue implements topics.Framer: Unframe, retrying a registry it cannot reach (with
// backoff, a warning each time) until ctx ends; a record is never dead-lettered because the
// registry was away. It also checks the message index is the topic's record message's.
func (r *Registry) UnframeValue(ctx context.Context, topic string, value []byte) ([]byte, error) {
	want, err := r.index(topic)
	if err != nil {
		return nil, err
	}
	return r.UnframeMessage(ctx, topic, want, value)
}

// UnframeMessage implements topics.Framer: UnframeValue checking the message index against want.
func (r *Registry) UnframeMessage(ctx context.Context, topic string, want []int, value []byte) ([]byte, error) {
	wait := retryFirst
	for {
		f, err := r.Unframe(ctx, topic, value)
		switch {
		case err == nil:
			if !topics.EqualMessageIndex(f.Index, want) {
				return nil, fmt.Errorf("%s: schema id %d: message index %v, want %v (the topic's record message): %w",
					topic, f.ID, f.Index, want, topics.ErrSchemaMismatch)
			}
			return f.Payload, nil
		case errors.Is(err, topics.ErrMalformed), errors.Is(err, topics.ErrSchemaNotRegistered), errors.Is(err, topics.ErrSchemaMismatch):
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("schemareg: %s: %w (registry: %w)", topic, ctx.Err(), err)
		}
		slog.Warn("schema registry unreachable; retrying", "topic", topic, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("schemareg: %s: %w (registry: %w)", topic, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

var _ topics.Framer = (*Registry)(nil)

// FramingNames registers every topic's schema of names (Schemas, Register) and returns names in
// Protobuf with r as its Registry: what a stage started with --schema-registry writes with.
func (r *Registry) FramingNames(ctx context.Context, names topics.Names) (topics.Names, error) {
	ss, err := Schemas(names)
	if err != nil {
		return names, err
	}
	if _, err := r.Register(ctx, ss...); err != nil {
		return names, err
	}
	names.Format, names.Registry = topics.FormatProtobuf, r
	return names, nil
}
