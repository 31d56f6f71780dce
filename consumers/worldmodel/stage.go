package worldmodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// StageName is the world-model stage's name: consumer group "wmrl-worldmodel", metrics label and
// DLQ stage header.
const StageName = "worldmodel"

// HandlerConfig configures the world-model stage's record handler. Scorer is required.
type HandlerConfig struct {
	Scorer Scorer
	Names  topics.Names
	// Concurrency bounds the Score calls in flight (default 1). It is separate from the stage
	// runtime's handler bound so that decoding and artifact resolution do not hold a scoring
	// slot: NewStage runs 2×Concurrency handlers for that reason.
	Concurrency int
	// Model labels the records' model field (e.g. the served model name).
	Model string
	// Artifacts resolves artifacts sent by reference (claim check) before scoring; nil makes
	// every by-reference rollout invalid with a reason that says so. A reference that cannot be
	// read or whose digest does not match is likewise an invalid rollout, not a crash.
	Artifacts artifact.Resolver
	// Logger receives a warning per unresolvable artifact (default slog.Default()).
	Logger *slog.Logger
	Now    func() time.Time
	// Registerer, when not nil, gets the handler's wmrl_worldmodel_failures_total; NewStage
	// sets it to the stage's registry.
	Registerer prometheus.Registerer
}

// Handler scores rollouts into predicted-reward records. Every valid rollout gets exactly one
// record: a score, or a failure (timeout, error, invalid) with its reason, returned together with
// a stage.Failed error wrapping ErrScoringFailed; a record that is not a valid rollout is returned
// as a plain error, which the runtime sends to the dead-letter topic.
type Handler struct {
	cfg      HandlerConfig
	slots    chan struct{}
	log      *slog.Logger
	failures *prometheus.CounterVec
}

// NewHandler validates cfg.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Scorer == nil {
		return nil, fmt.Errorf("%w: nil scorer", ErrInvalidConfig)
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, slots: make(chan struct{}, cfg.Concurrency), log: cfg.Logger.With("stage", StageName), failures: newFailures()}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.failures); err != nil {
			return nil, fmt.Errorf("worldmodel: metrics: %w", err)
		}
	}
	return h, nil
}

// Handle implements stage.Handler.
func (h *Handler) Handle(ctx context.Context, rec *kgo.Record) ([]*kgo.Record, error) {
	r, err := h.cfg.Names.DecodeRolloutRecord(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("worldmodel: %w", err)
	}
	p := topics.PredictedReward{RolloutRef: r.RolloutRef, Anchor: r.Anchor, Model: h.cfg.Model}
	in := Input{
		RunID: r.RunID, GroupID: r.GroupID, RolloutID: r.RolloutID, Stream: r.Stream, Step: r.Step,
		Prompt: r.Prompt, Artifact: []byte(r.Artifact), ArtifactURI: r.ArtifactURI, Meta: r.Meta,
	}
	if r.ArtifactURI != "" {
		data, err := artifact.Resolve(ctx, h.cfg.Artifacts, r.ArtifactURI, r.ArtifactSHA256)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			p.Status, p.Reason = topics.StatusInvalid, limitText(err.Error())
			h.log.Warn("artifact not resolvable; rollout recorded as invalid", "run", r.RunID, "rollout", r.RolloutID, "err", err)
			return h.record(p)
		}
		in.Artifact = data
	}
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res, err := h.cfg.Scorer.Score(ctx, in)
	<-h.slots
	if err != nil {
		// Shutdown: the record is handed back and scored again by the next owner.
		return nil, err
	}
	p.Status, p.Attempts, p.LatencyMS = res.Status, res.Attempts, float64(res.Latency.Microseconds())/1000
	if res.Status == StatusOK {
		s := res.Score
		p.Score = &s
	} else {
		p.Reason = limitText(res.Reason)
		if p.Reason == "" {
			p.Reason = string(res.Status)
		}
	}
	return h.record(p)
}

func (h *Handler) record(p topics.PredictedReward) ([]*kgo.Record, error) {
	if p.Status != topics.StatusOK {
		h.failures.WithLabelValues(string(p.Status)).Inc()
	}
	p.CreatedAt = h.cfg.Now().UTC()
	out, err := h.cfg.Names.PredictedRecord(p)
	if err != nil {
		// The scorer's contract keeps scores in range, so this is a bug, not bad input; it still
		// goes to the DLQ rather than silently dropping the rollout.
		return nil, fmt.Errorf("worldmodel: build predicted record for %s: %w", p.RolloutID, err)
	}
	if p.Status != topics.StatusOK {
		// The failure record is produced (the correction consumer masks the row), and the
		// runtime counts, logs and windows the failure so that a broken judge is not silent.
		return []*kgo.Record{out}, stage.Failed(fmt.Errorf("%w: rollout %s (run %s): %s: %s", ErrScoringFailed, p.RolloutID, p.RunID, p.Status, p.Reason))
	}
	return []*kgo.Record{out}, nil
}

func limitText(s string) string {
	if len(s) <= topics.MaxReasonLen {
		return s
	}
	return excerpt(s, topics.MaxReasonLen-8)
}

// NewStage builds the world-model stage over the stage runtime: it consumes the rollouts topic
// (sc.Topics defaults to it, sc.Name to StageName) with 2×hc.Concurrency handlers, hc.Concurrency
// of which score at a time (see HandlerConfig.Concurrency). The handler's metrics, and the
// scorer's when it is a prometheus.Collector (OpenAIScorer is), are served with the stage's.
func NewStage(sc stage.Config, hc HandlerConfig) (*stage.Stage, error) {
	hc.Names = sc.Names
	if sc.Registry == nil {
		sc.Registry = prometheus.NewRegistry()
	}
	hc.Registerer = sc.Registry
	sc.Name = cmp.Or(sc.Name, StageName)
	if len(sc.Topics) == 0 {
		sc.Topics = []string{sc.Names.Rollouts()}
	}
	hc.Logger = cmp.Or(hc.Logger, sc.Logger)
	scoring := max(hc.Concurrency, 1)
	sc.Concurrency = cmp.Or(sc.Concurrency, 2*scoring)
	if sc.Concurrency < scoring {
		return nil, errors.Join(ErrInvalidConfig, fmt.Errorf("stage concurrency %d below scoring concurrency %d would leave scoring slots idle", sc.Concurrency, scoring))
	}
	h, err := NewHandler(hc)
	if err != nil {
		return nil, err
	}
	if c, ok := hc.Scorer.(prometheus.Collector); ok {
		if err := sc.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("worldmodel: scorer metrics: %w", err)
		}
	}
	return stage.New(sc, h.Handle)
}
