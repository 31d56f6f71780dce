package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// StageName is the sandbox stage's name: consumer group "wmrl-sandbox", metrics label and DLQ
// stage header.
const StageName = "sandbox"

// HandlerConfig configures the sandbox stage's record handler. Pool is required.
type HandlerConfig struct {
	Pool  *Pool
	Names topics.Names
	// Policy decides the reward of a timed-out execution (default PolicyMissing).
	Policy Policy
	// Artifacts resolves artifacts sent by reference; nil makes every by-reference anchor
	// rollout invalid with a reason that says so.
	Artifacts artifact.Resolver
	// ArtifactName is the file name the executor writes the artifact to (e.g. "solution.py").
	ArtifactName string
	Now          func() time.Time
}

// Handler executes anchor rollouts into executed-reward records. Non-anchor rollouts produce
// nothing (they are consumed and committed); every valid anchor rollout gets exactly one record,
// with a stage.Failed error wrapping ErrExecutionFailed when the execution did not succeed;
// a record that is not a valid rollout is returned as an error for the dead-letter topic.
type Handler struct {
	cfg HandlerConfig
}

// NewHandler validates cfg.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrConfig)
	}
	if cfg.Policy != PolicyMissing && cfg.Policy != PolicyZero {
		return nil, fmt.Errorf("%w: %v", ErrUnknownPolicy, cfg.Policy)
	}
	if cfg.ArtifactName != "" {
		if _, err := artifactName(cfg.ArtifactName); err != nil {
			return nil, err
		}
		if cfg.ArtifactName == RolloutFile || cfg.ArtifactName == RunOutDir || cfg.ArtifactName == runCollectorDir {
			return nil, fmt.Errorf("%w: artifact name %q is taken (the rollout record's, or the run step's outputs)", ErrConfig, cfg.ArtifactName)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{cfg: cfg}, nil
}

// Handle implements stage.Handler.
func (h *Handler) Handle(ctx context.Context, rec *kgo.Record) ([]*kgo.Record, error) {
	r, err := h.cfg.Names.DecodeRolloutRecord(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if !r.Anchor {
		return nil, nil
	}
	e := topics.ExecutedReward{RolloutRef: r.RolloutRef}
	data := []byte(r.Artifact)
	if r.ArtifactURI != "" {
		if data, err = artifact.Resolve(ctx, h.cfg.Artifacts, r.ArtifactURI, r.ArtifactSHA256); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e.Status, e.Reason, e.ExitCode = topics.StatusInvalid, limitText(err.Error(), topics.MaxReasonLen), -1
			return h.record(e)
		}
	}
	// The grade step gets the rollout itself as {dir}/rollout.json (the task's private data: every
	// meta key, the labels); the run step gets only the artifact and the --input-meta keys.
	record, err := topics.EncodeRollout(r)
	if err != nil {
		return nil, fmt.Errorf("sandbox: re-encode rollout %s: %w", r.RolloutID, err)
	}
	res, err := h.cfg.Pool.Submit(ctx, Job{
		RunID: r.RunID, GroupID: r.GroupID, RolloutID: r.RolloutID, Step: r.Step,
		Artifact: data, ArtifactName: h.cfg.ArtifactName, Rollout: record, Meta: r.Meta,
	})
	if err != nil {
		// Submit fails only when ctx ends before a slot frees: the record is handed back.
		return nil, err
	}
	if res.Canceled() {
		// Shutdown interrupted the run; the record is handed back and executed again later.
		return nil, ctx.Err()
	}
	e.Status = topics.Status(res.Status.String())
	e.ExitCode, e.DurationMS = res.ExitCode, float64(res.Duration.Microseconds())/1000
	e.StderrTail = limitText(res.StderrTail, topics.MaxStderrTail)
	if score, usable := h.cfg.Policy.Apply(res); usable {
		e.Score = &score
		e.Imputed = res.Status != StatusOK
	}
	if res.Status != StatusOK {
		e.Reason = limitText(res.Reason, topics.MaxReasonLen)
		if e.Reason == "" {
			e.Reason = res.Status.String()
		}
	}
	return h.record(e)
}

func (h *Handler) record(e topics.ExecutedReward) ([]*kgo.Record, error) {
	e.CreatedAt = h.cfg.Now().UTC()
	out, err := h.cfg.Names.ExecutedRecord(e)
	if err != nil {
		return nil, fmt.Errorf("sandbox: build executed record for %s: %w", e.RolloutID, err)
	}
	if e.Status != topics.StatusOK {
		// The failure record is produced; the runtime counts, logs and windows the failure so
		// that a missing script or a broken task is not silent.
		err := fmt.Errorf("%w: rollout %s (run %s): %s (exit %d): %s", ErrExecutionFailed, e.RolloutID, e.RunID, e.Status, e.ExitCode, e.Reason)
		if tail := strings.TrimSpace(e.StderrTail); tail != "" {
			err = fmt.Errorf("%w; stderr: %s", err, limitText(tail, 512))
		}
		return []*kgo.Record{out}, stage.Failed(err)
	}
	return []*kgo.Record{out}, nil
}

// ErrExecutionFailed is wrapped by the stage.Failed error the handler returns with the record of
// an anchor rollout whose execution did not succeed (timeout, error, oom, invalid).
var ErrExecutionFailed = errors.New("execution failed")

// limitText keeps the tail of s within max bytes as valid UTF-8 (the end of stderr or of a reason
// is the informative part).
func limitText(s string, max int) string {
	if len(s) > max {
		s = s[len(s)-max:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// NewStage builds the sandbox stage over the stage runtime: it consumes the rollouts topic
// (sc.Topics defaults to it, sc.Name to StageName). The pool's slots bound executions; the
// runtime runs 2×slots handlers by default so that decoding a rollout and resolving its artifact
// overlap with the executions, and a freed slot is taken by the next anchor rollout at once.
func NewStage(sc stage.Config, hc HandlerConfig) (*stage.Stage, error) {
	hc.Names = sc.Names
	sc.Name = cmp.Or(sc.Name, StageName)
	if len(sc.Topics) == 0 {
		sc.Topics = []string{sc.Names.Rollouts()}
	}
	h, err := NewHandler(hc)
	if err != nil {
		return nil, err
	}
	if sc.Concurrency == 0 {
		sc.Concurrency = 2 * hc.Pool.Slots()
	}
	// The registry is made here rather than by the runtime so the pool's
	// wmrl_sandbox_* series are served next to the stage's.
	if sc.Registry == nil {
		sc.Registry = prometheus.NewRegistry()
	}
	if err := hc.Pool.instrument(sc.Registry); err != nil {
		return nil, err
	}
	if lc, ok := hc.Pool.exec.(interface{ LogContainment() }); ok {
		started := sc.Started
		sc.Started = func() {
			lc.LogContainment()
			if started != nil {
				started()
			}
		}
	}
	return stage.New(sc, h.Handle)
}
