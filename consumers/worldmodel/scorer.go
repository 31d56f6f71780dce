// Package worldmodel scores rollouts with a world model: an OpenAI-compatible chat-completions
// endpoint (vLLM, SGLang, OpenAI) or a built-in Go predictor.
//
// A Scorer turns every input into exactly one Result, failures included, because downstream
// stages decide step completeness from the presence of one record per rollout (docs/stages.md).
// Handler and NewStage run a Scorer as the world-model stage over the shared stage runtime
// (internal/stage), which provides the bounded concurrency, out-of-order completion and
// offset-safe commits.
package worldmodel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// Input is what a world model may see of a rollout. Artifact holds the rollout's output when it
// travelled inline; otherwise ArtifactURI names it (claim check) and the caller decides whether
// to resolve it before scoring.
type Input struct {
	RunID       string
	GroupID     string
	RolloutID   string
	Stream      string
	Step        int64
	Prompt      string
	Artifact    []byte
	ArtifactURI string
	Meta        map[string]string
}

// Status is the outcome class of one scoring: the reward record's status, so a Result's status
// goes on the record as it is.
type Status = topics.Status

// The four outcomes of scoring. The zero Status is none of them, so a Result that was never
// filled in cannot pass for a success.
const (
	StatusOK      = topics.StatusOK
	StatusTimeout = topics.StatusTimeout
	StatusError   = topics.StatusError
	StatusInvalid = topics.StatusInvalid
)

// Result is the outcome of scoring one input. Score is meaningful only when Status is StatusOK
// (it is 0 otherwise); Reason explains any other status. Attempts counts requests made and
// Latency is the wall time of the whole Score call, retries and backoff included.
type Result struct {
	Score    float64
	Status   Status
	Reason   string
	Attempts int
	Latency  time.Duration
}

// Scorer predicts the execution score of a rollout.
//
// Score always describes the input's fate in the Result: timeouts, transport errors and
// unusable replies are results with a failure status, not errors. The error return is reserved
// for ctx being done (shutdown); it wraps ctx's cause, and the caller should hand the input back
// (leave its offset uncommitted) rather than publish anything for it.
type Scorer interface {
	Score(ctx context.Context, in Input) (Result, error)
}

// PredictFunc is an in-process world model, such as the demo's low-fidelity proxy. An error is
// reported as StatusError (StatusTimeout if it wraps context.DeadlineExceeded while ctx itself is
// still live).
type PredictFunc func(ctx context.Context, in Input) (float64, error)

// BuiltinScorer adapts a PredictFunc to the Scorer contract, validating the score range so an
// in-process model is held to the same rules as a remote one.
type BuiltinScorer struct {
	predict            PredictFunc
	scoreMin, scoreMax float64
}

// NewBuiltinScorer wraps predict; scores outside [scoreMin, scoreMax] become StatusInvalid.
// Passing 0, 0 selects the default range [0, 1].
func NewBuiltinScorer(predict PredictFunc, scoreMin, scoreMax float64) (*BuiltinScorer, error) {
	if predict == nil {
		return nil, fmt.Errorf("%w: nil PredictFunc", ErrInvalidConfig)
	}
	lo, hi, err := scoreRange(scoreMin, scoreMax)
	if err != nil {
		return nil, err
	}
	return &BuiltinScorer{predict: predict, scoreMin: lo, scoreMax: hi}, nil
}

// Score implements Scorer.
func (b *BuiltinScorer) Score(ctx context.Context, in Input) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("worldmodel: score rollout %q: %w", in.RolloutID, context.Cause(ctx))
	}
	start := time.Now()
	v, err := b.predict(ctx, in)
	res := Result{Attempts: 1, Latency: time.Since(start)}
	if ctx.Err() != nil {
		return res, fmt.Errorf("worldmodel: score rollout %q: %w", in.RolloutID, context.Cause(ctx))
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		res.Status, res.Reason = StatusTimeout, limitReason("predict: "+err.Error())
	case err != nil:
		res.Status, res.Reason = StatusError, limitReason("predict: "+err.Error())
	default:
		res.Score, res.Status, res.Reason = checkRange(v, b.scoreMin, b.scoreMax)
	}
	return res, nil
}

// scoreRange applies the [0, 1] default and rejects empty or non-finite ranges.
func scoreRange(lo, hi float64) (float64, float64, error) {
	if lo == 0 && hi == 0 {
		return 0, 1, nil
	}
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) || lo >= hi {
		return 0, 0, fmt.Errorf("%w: score range [%g, %g] is empty or not finite", ErrInvalidConfig, lo, hi)
	}
	return lo, hi, nil
}

// checkRange validates a parsed score. The value goes into the reason, not into Score, so that a
// consumer that forgets to check Status still cannot train on it.
func checkRange(v, lo, hi float64) (float64, Status, string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, StatusInvalid, fmt.Sprintf("score %g is not finite", v)
	}
	if v < lo || v > hi {
		return 0, StatusInvalid, fmt.Sprintf("score %g outside [%g, %g]", v, lo, hi)
	}
	return v, StatusOK, ""
}

// maxReasonBytes bounds a Result's reason: it ends up in a Kafka record for every failure.
const maxReasonBytes = 512

func limitReason(s string) string { return excerpt(s, maxReasonBytes) }
