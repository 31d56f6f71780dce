package topics

import "cmp"

// DefaultPrefix is prepended to every topic name so several deployments can share one cluster.
const DefaultPrefix = "wmrl."

// Topic suffixes. The version suffix is part of the name because a breaking schema change gets a
// new topic, which lets old and new consumers run side by side during a migration.
const (
	SuffixRollouts    = "rollouts.v1"
	SuffixSteps       = "steps.v1"
	SuffixRuns        = "runs.v1"
	SuffixPredicted   = "rewards.predicted.v1"
	SuffixExecuted    = "rewards.executed.v1"
	SuffixAdvantages  = "advantages.v1"
	SuffixCalibration = "calibration.v1"
	SuffixDLQ         = "dlq.v1"
)

// Names resolves the full topic names for one prefix, and the format their records are written in.
type Names struct {
	Prefix string
	// Format is the wire format the Names' record builders write the record topics (rollouts,
	// steps, runs, rewards) in; empty is FormatJSON. Readers decode by each record's content-type
	// (RecordFormat), so writers in different formats can share the topics.
	Format Format
	// Registry, when set with FormatProtobuf, makes the record builders write the topics Framed
	// reports in the Confluent wire format, and the Names' Decode*Record methods check a framed
	// record's schema id against it. nil: no framing.
	Registry Framer
}

// Codec returns the codec of n's format.
func (n Names) Codec() Codec { return Codec{Format: n.Format} }

// NewNames returns the names under prefix; an empty prefix means DefaultPrefix.
func NewNames(prefix string) Names {
	prefix = cmp.Or(prefix, DefaultPrefix)
	return Names{Prefix: prefix}
}

// EffectivePrefix is the prefix in use: a zero Names means the default topics.
func (n Names) EffectivePrefix() string { return cmp.Or(n.Prefix, DefaultPrefix) }

func (n Names) Rollouts() string { return n.EffectivePrefix() + SuffixRollouts }
func (n Names) Steps() string    { return n.EffectivePrefix() + SuffixSteps }

// Runs is the run-control topic: end-of-run requests of trainers and operators (EndRequestRecord).
// It is a topic of its own so that who may end a run is an ACL of its own: the principals that
// write steps (a generator) need not be the ones that may end runs (docs/security.md).
func (n Names) Runs() string { return n.EffectivePrefix() + SuffixRuns }

func (n Names) Predicted() string   { return n.EffectivePrefix() + SuffixPredicted }
func (n Names) Executed() string    { return n.EffectivePrefix() + SuffixExecuted }
func (n Names) Advantages() string  { return n.EffectivePrefix() + SuffixAdvantages }
func (n Names) Calibration() string { return n.EffectivePrefix() + SuffixCalibration }
func (n Names) DLQ() string         { return n.EffectivePrefix() + SuffixDLQ }

// All lists every topic in a stable order.
func (n Names) All() []string {
	return []string{n.Rollouts(), n.Steps(), n.Runs(), n.Predicted(), n.Executed(), n.Advantages(), n.Calibration(), n.DLQ()}
}

// CoPartitioned lists the topics that must share one partition count: the correction consumer
// joins them by run_id, so a run must land on the same partition number in each.
func (n Names) CoPartitioned() []string {
	return []string{n.Rollouts(), n.Steps(), n.Runs(), n.Predicted(), n.Executed(), n.Advantages(), n.Calibration()}
}
