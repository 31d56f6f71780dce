package correct

import (
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// staleness is what a step's manifest says about the policy behind its rollouts: how many steps
// the generating checkpoint lags the step (known only when the manifest carries policy_step),
// and whether that lag exceeds the consumer's bound, in which case every rollout of the step is
// masked as stale. It depends on the step's own manifest and the configured bound only, so a
// replay with the same bound reproduces it (correction/doc.go, "Step semantics").
type staleness struct {
	steps  int64
	known  bool
	masked bool
}

// stalenessOf computes a step's staleness under maxStaleness (0 turns masking off). A manifest
// without policy_step is never masked: nothing says how old its policy was.
func stalenessOf(m *topics.StepManifest, maxStaleness int64) staleness {
	if m.PolicyStep == nil {
		return staleness{}
	}
	s := staleness{steps: m.Step - *m.PolicyStep, known: true}
	s.masked = maxStaleness > 0 && s.steps > maxStaleness
	return s
}

// apply stamps a row of the step with its staleness and, when the correction core masked it
// because the rollout was stale, the MaskStale reason. Rows of manifests without policy_step stay
// v1 rows, which keeps the advantage bytes and digest of such runs unchanged.
func (s staleness) apply(a topics.AdvantageRow, r *correction.Row) topics.AdvantageRow {
	if s.known {
		a.Staleness, a.StalenessOK = s.steps, true
	}
	if r.Stale {
		a.MaskReason = topics.MaskStale
	}
	return a
}

// policyStepEqual compares two optional policy steps; a redelivered manifest must agree on it.
func policyStepEqual(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
