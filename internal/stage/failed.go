package stage

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/health"
)

// FailedError marks a handler's outputs as the record of a failure: the world model could not
// score the rollout, the sandbox could not execute it. Such an input is not bad (it is not
// dead-lettered; its outputs are produced and it is committed like any other) but it is not ok
// either: the runtime counts it as wmrl_stage_records_total{result="failed"}, logs it at warn
// (rate-limited) and feeds the failure share that /healthz/scoring reports.
type FailedError struct{ Err error }

func (e *FailedError) Error() string { return e.Err.Error() }
func (e *FailedError) Unwrap() error { return e.Err }

// Failed wraps err as a FailedError; a handler returns it together with its failure records.
func Failed(err error) error { return &FailedError{Err: err} }

// outcome sorts a handler's return into the record result label and what the failure window
// sees: a FailedError keeps its outputs; any other error is a dead letter. Records that produce
// nothing (e.g. a non-anchor rollout at the sandbox) are no result of the stage's work and are
// left out of the window.
func (s *Stage) outcome(outs []*kgo.Record, err error) ([]*kgo.Record, string, error) {
	var fe *FailedError
	switch {
	case err == nil:
		if len(outs) > 0 {
			s.failures.Observe(nil)
		}
		return outs, "ok", nil
	case errors.As(err, &fe):
		s.failures.Observe(fe.Err)
		return outs, resultFailed, nil
	}
	return outs, "", err
}

// resultFailed is the wmrl_stage_records_total result of an input whose outputs record a failure.
const resultFailed = "failed"

// newFailures is the stage's failure window, with its share exported as a gauge.
func (s *Stage) newFailures() *health.Failures {
	return health.NewFailures(health.FailuresConfig{
		What: s.cfg.Name, MaxShare: s.cfg.MaxFailureShare, Window: s.cfg.FailureWindow,
		Logger: s.log, Share: s.metrics.failureShare.Set, StallAfter: s.cfg.StallAfter,
	})
}

// ScoringCheck is the /healthz/scoring check: nil unless the share of failed results among the
// last FailureWindow is above MaxFailureShare.
func (s *Stage) ScoringCheck() error { return s.failures.Check() }
