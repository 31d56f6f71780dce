package correct

import (
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// Limits bound what the consumer buffers for steps that are not complete yet, so hostile or broken
// producers (manifests of steps that never complete, rewards for steps nobody announces) cannot
// grow its memory without end. A record that would exceed a limit is dead-lettered with the
// limit's reason (wmrl_correct_dead_letters_total{reason}); the step it belonged to then never
// completes, and the run stalls there as it would with the record missing.
//
// The per-run and per-step limits depend only on the run's own input order, so a replay with
// the same Limits reproduces the live decisions and digest. The per-instance limits depend on the
// other runs sharing the instance (and on how the partitions' records interleave), so they are a
// safety net sized for hostile loads only: a run they hit cannot be replayed bit for bit.
type Limits struct {
	// PendingStepsPerRun: a record of step v is refused (reason pending-steps-exceeded) when v is
	// PendingStepsPerRun or more steps beyond the run's first incomplete step (which does not
	// depend on when steps are sealed), so at most this many incomplete steps are buffered per run.
	PendingStepsPerRun int
	// StepGroups and StepRows bound the claimed size of one step: a manifest with more groups, or
	// more rollouts in all (the sum of the group sizes), is refused (reason step-too-large); so
	// are rewards for a step without a manifest once 3×StepRows of them are buffered (a group
	// buffers at most its size in predicted and twice its size in executed rewards). Group sizes
	// are bounded by topics.MaxGroupSize.
	StepGroups int
	StepRows   int
	// PendingSteps and PendingGroups bound, per instance, the buffered steps and the groups of
	// their manifests (reason instance-pending-exceeded). 0: no limit (replay).
	PendingSteps  int
	PendingGroups int
	// ActiveRuns bounds the runs the instance holds (reason too-many-runs for a record of a run
	// beyond it) and HeldDeadLetters the dead letters waiting for their transaction (beyond it
	// they are folded per partition into one dead letter by reference, reason
	// dead-letters-exceeded); flood.go. 0: no limit (replay).
	ActiveRuns      int
	HeldDeadLetters int
	// BatchBytes bounds what one fetched record batch may decompress to (franz-go's
	// MaxDecompressBatchBytes); a batch over it is dead-lettered by reference (reason
	// batch-too-large) and skipped unread (skip.go). It decides which records exist for the
	// engine, so a replay must use the live value.
	BatchBytes int
}

// Default limits. They must not refuse a legitimate backlog, since a refused manifest stalls
// its run for good: a JSONL file published at once while the sandbox lags puts a run thousands of
// steps ahead of its first incomplete step, so the per-run limit is generous and memory is
// bounded by the instance limits (a buffered manifest costs about 500 bytes per group: the
// default groups limit is about 128 MiB). docs/reliability.md gives the measured bound.
const (
	DefaultPendingStepsPerRun = 4096
	DefaultStepGroups         = topics.MaxGroupsPerStep
	DefaultStepRows           = 1 << 16
	DefaultPendingSteps       = 1 << 16
	DefaultPendingGroups      = 1 << 18
	// DefaultActiveRuns is far above a pod's share of a fleet (docs/capacity.md: about 2,700 runs
	// of two full windows fit a 4 GiB pod) and keeps a flood of distinct runs within the
	// documented bound; DefaultHeldDeadLetters keeps the waiting dead letters to a few tens of MiB.
	DefaultActiveRuns      = 1 << 13
	DefaultHeldDeadLetters = 1 << 14
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{PendingStepsPerRun: DefaultPendingStepsPerRun, StepGroups: DefaultStepGroups, StepRows: DefaultStepRows,
		PendingSteps: DefaultPendingSteps, PendingGroups: DefaultPendingGroups, BatchBytes: DefaultMaxBatchBytes,
		ActiveRuns: DefaultActiveRuns, HeldDeadLetters: DefaultHeldDeadLetters}
}

// withDefaults fills zero per-run and per-step limits with the defaults; instance limits stay 0
// (none) unless instance is set.
func (l Limits) withDefaults(instance bool) (Limits, error) {
	d := DefaultLimits()
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&l.PendingStepsPerRun, d.PendingStepsPerRun)
	fill(&l.StepGroups, d.StepGroups)
	fill(&l.StepRows, d.StepRows)
	fill(&l.BatchBytes, DefaultMaxBatchBytes)
	if instance {
		fill(&l.PendingSteps, d.PendingSteps)
		fill(&l.PendingGroups, d.PendingGroups)
		fill(&l.ActiveRuns, d.ActiveRuns)
		fill(&l.HeldDeadLetters, d.HeldDeadLetters)
	}
	if l.BatchBytes < topics.MaxRecordBytes || l.BatchBytes > math.MaxInt32 {
		return l, fmt.Errorf("%w: Limits.BatchBytes %d not in [%d, %d]: one record at the record limit must fit", ErrConfig, l.BatchBytes, topics.MaxRecordBytes, math.MaxInt32)
	}
	for name, v := range map[string]int{"PendingStepsPerRun": l.PendingStepsPerRun, "StepGroups": l.StepGroups,
		"StepRows": l.StepRows, "PendingSteps": l.PendingSteps, "PendingGroups": l.PendingGroups,
		"ActiveRuns": l.ActiveRuns, "HeldDeadLetters": l.HeldDeadLetters} {
		if v < 0 {
			return l, fmt.Errorf("%w: Limits.%s %d must be >= 0", ErrConfig, name, v)
		}
	}
	return l, nil
}

// DLQ reasons of the limits.
const (
	reasonPendingSteps     = "pending-steps-exceeded"
	reasonStepTooLarge     = "step-too-large"
	reasonInstancePending  = "instance-pending-exceeded"
	limitDeadLetterMaxHeld = 16 << 20 // see heldDeadLetter
)

// limitError is a record refused by a limit; its DLQ reason is the limit's.
type limitError struct {
	reason string
	msg    string
}

func (e *limitError) Error() string     { return e.msg }
func (e *limitError) DLQReason() string { return e.reason }

func overLimit(reason, format string, args ...any) error {
	return &limitError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// frontier is the run's first step that is not buffered complete: every step before it is
// complete (sealed or ready to seal). It depends only on the records the run has received, not
// on when steps were sealed.
func (e *engine) frontier(rb *runBuf) int64 {
	v := rb.sealed + 1
	for {
		b := rb.steps[v]
		if b == nil || !e.complete(b) {
			return v
		}
		v++
	}
}

// admitStep decides whether a record of step v of run rb, which has no buffer yet, may open one.
func (e *engine) admitStep(rb *runBuf, v int64) error {
	if n := int64(e.limits.PendingStepsPerRun); n > 0 && v >= rb.sealed+1+n {
		// Cheap test first: the frontier is at least sealed+1.
		if f := e.frontier(rb); v >= f+n {
			return overLimit(reasonPendingSteps, "run %s step %d: %d or more steps beyond the first incomplete step %d (limit %d pending steps per run)",
				rb.id, v, n, f, n)
		}
	}
	if n := e.limits.PendingSteps; n > 0 && e.nSteps >= n {
		return overLimit(reasonInstancePending, "run %s step %d: the instance already buffers %d incomplete steps (limit %d)", rb.id, v, e.nSteps, n)
	}
	return nil
}

// admitManifest checks a manifest's claimed size against the step and instance limits.
func (e *engine) admitManifest(m *topics.StepManifest) error {
	rows := 0
	for _, g := range m.Groups {
		rows += g.Size
	}
	switch {
	case len(m.Groups) > e.limits.StepGroups:
		return overLimit(reasonStepTooLarge, "run %s step %d: manifest has %d groups (limit %d)", m.RunID, m.Step, len(m.Groups), e.limits.StepGroups)
	case rows > e.limits.StepRows:
		return overLimit(reasonStepTooLarge, "run %s step %d: manifest has %d rollouts (limit %d)", m.RunID, m.Step, rows, e.limits.StepRows)
	case e.limits.PendingGroups > 0 && e.nGroups+len(m.Groups) > e.limits.PendingGroups:
		return overLimit(reasonInstancePending, "run %s step %d: %d groups would exceed the instance's limit of %d buffered groups",
			m.RunID, m.Step, e.nGroups+len(m.Groups), e.limits.PendingGroups)
	}
	return nil
}

// admitReward bounds the rewards buffered for a step whose manifest has not arrived.
func (e *engine) admitReward(b *stepBuf, run string) error {
	if b.manifest == nil && b.rewards >= 3*e.limits.StepRows {
		return overLimit(reasonStepTooLarge, "run %s step %d: %d rewards buffered without a manifest (limit %d)", run, b.step, b.rewards, 3*e.limits.StepRows)
	}
	return nil
}

// dropStep forgets a step's buffer in the instance counters (sealed or reset).
func (e *engine) dropStep(b *stepBuf) {
	e.nSteps--
	e.nGroups -= len(b.groups)
}

// heldDeadLetter builds the dead letter of rec. Dead letters wait in memory until the holdback
// passes their source (see takeDeadLetters), and a step that never completes holds the holdback
// for ever; once limitDeadLetterMaxHeld bytes of them wait, further ones are built minimal (no
// value, no source headers), so their memory stays bounded by their count. Which records are
// dead-lettered does not change, only how much of them the dead letter carries.
func (e *engine) heldDeadLetter(rec *kgo.Record, err error, minimal bool) *kgo.Record {
	w := e.dlqw
	if minimal || e.dlqBytes >= limitDeadLetterMaxHeld {
		w = w.Minimal()
	}
	dl := w.Record(rec, err)
	e.dlqBytes += stage.RecordBytes(dl)
	return dl
}

// heldDeadLetters counts the dead letters waiting for their transaction.
func (e *engine) heldDeadLetters() int {
	n := 0
	for _, d := range e.dlq {
		n += len(d)
	}
	return n
}
