package topics

import (
	"encoding/json"
	"fmt"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ptr(f float64) *float64 { return &f }

func sampleRollout() Rollout {
	return Rollout{
		Schema: SchemaRollout, RolloutRef: RolloutRef{RunID: "r1", Step: 3, GroupID: "g3", RolloutID: "g3-r2", Stream: "mle", PolicyVersion: "ckpt-3"},
		Anchor: true, Index: 2, Prompt: "fit the <data> & report",
		Artifact: `{"model":"ridge","alpha":0.1}`, ArtifactSize: 29,
		Meta: map[string]string{"task": "t17", "lang": "python"}, CreatedAt: t0,
	}
}

func sampleStep() StepManifest {
	return StepManifest{
		Schema: SchemaStep, RunID: "r1", Step: 3, PolicyVersion: "ckpt-3", CreatedAt: t0,
		Groups: []GroupManifest{
			{GroupID: "g0", Stream: "mle", Size: 8, Anchor: false},
			{GroupID: "g3", Stream: "mle", Size: 8, Anchor: true},
			{GroupID: "g5", Stream: "dsbench", Size: 4, Anchor: false},
		},
	}
}

func samplePredicted() PredictedReward {
	return PredictedReward{
		Schema:     SchemaPredicted,
		RolloutRef: RolloutRef{RunID: "r1", Step: 3, GroupID: "g3", RolloutID: "g3-r2", Stream: "mle", PolicyVersion: "ckpt-3"},
		Anchor:     true,
		Score:      ptr(0.625),
		Status:     StatusOK,
		Model:      "wm-proxy",
		Attempts:   1,
		LatencyMS:  12.5,
		CreatedAt:  t0,
	}
}

func sampleExecuted() ExecutedReward {
	return ExecutedReward{
		Schema:     SchemaExecuted,
		RolloutRef: RolloutRef{RunID: "r1", Step: 3, GroupID: "g3", RolloutID: "g3-r2", Stream: "mle", PolicyVersion: "ckpt-3"},
		Score:      ptr(0.5),
		Status:     StatusOK,
		DurationMS: 1834.25,
		CreatedAt:  t0,
	}
}

func sampleImputed() ExecutedReward {
	e := sampleExecuted()
	e.Score, e.Imputed, e.Status, e.Reason = ptr(0), true, StatusTimeout, "wall clock 600s exceeded"
	e.ExitCode, e.DurationMS, e.StderrTail = -9, 600000, "killed\n"
	return e
}

func sampleCalibration() CalibrationSnapshot {
	return CalibrationSnapshot{
		Schema: SchemaCalibration, RunID: "r1", Stream: "mle", Step: 3, FitVersion: 2, Pairs: 48,
		ConfigHash: "cfg-1a2b", Settings: "mode=default max-staleness=2", Digest: "sha256:9f86d081884c7d65", State: []byte{0, 1, 2, 250, 251},
		BreakX: []float64{0.05, 0.35, 0.8}, BreakY: []float64{0.1, 0.3, 0.3}, AnchorWeight: 1.75,
		BiasBefore: 0.125, BiasAfter: -0.0078125, StepPairs: 16, CreatedAt: t0,
	}
}

// sampleAdvantages is one step with an anchor group, a world-model group, a failed rollout and a
// group too small to grade (masked).
func sampleAdvantages() []AdvantageRow {
	var rows []AdvantageRow
	for i := 0; i < 4; i++ {
		rows = append(rows, AdvantageRow{
			RunID: "r1", Stream: "mle", Step: 3, GroupID: "g3", RolloutID: fmt.Sprintf("g3-r%d", i),
			PolicyVersion: "ckpt-3", Source: SourceAnchor,
			Predicted: 0.5 + 0.125*float64(i), PredictedOK: true, Calibrated: 0.4 + 0.1*float64(i),
			Executed: 0.25 * float64(i), ExecutedOK: true, Used: 0.25 * float64(i),
			Advantage: -1.3416 + 0.8944*float64(i), Weight: 1.75, Mask: true, CalibrationVersion: 2,
		})
	}
	for i := 0; i < 4; i++ {
		rows = append(rows, AdvantageRow{
			RunID: "r1", Stream: "mle", Step: 3, GroupID: "g0", RolloutID: fmt.Sprintf("g0-r%d", i),
			PolicyVersion: "ckpt-3", Source: SourceWorldModel,
			Predicted: 0.2 * float64(i+1), PredictedOK: true, Calibrated: 0.15 * float64(i+1),
			Used: 0.15 * float64(i+1), Advantage: 1.1 - 0.7*float64(i), Weight: 1, Mask: true, CalibrationVersion: 2,
		})
	}
	// A world-model failure: no predicted score, masked.
	rows[7].Predicted, rows[7].PredictedOK, rows[7].Calibrated, rows[7].Used = 0, false, 0, 0
	rows[7].Advantage, rows[7].Mask, rows[7].Weight = 0, false, 0
	// A group with a single graded rollout: masked, no source.
	rows = append(rows, AdvantageRow{
		RunID: "r1", Stream: "mle", Step: 3, GroupID: "g5", RolloutID: "g5-r0", PolicyVersion: "ckpt-3",
		Predicted: 0.9, PredictedOK: true, Calibrated: 0.85, Used: 0.85, Mask: false, CalibrationVersion: 2,
	}, AdvantageRow{
		RunID: "r1", Stream: "mle", Step: 3, GroupID: "g5", RolloutID: "g5-r1", PolicyVersion: "ckpt-3",
		Mask: false, CalibrationVersion: 2,
	})
	return rows
}

// sampleStepPolicyStep is sampleStep from a generator that knows its policy's training step: the
// rollouts of step 3 were sampled by the checkpoint of step 1.
func sampleStepPolicyStep() StepManifest {
	m := sampleStep()
	ps := int64(1)
	m.PolicyStep = &ps
	m.PolicyVersion = "ckpt-1"
	return m
}

// sampleStepEnd is the end-of-run record of sampleStep's run, whose last step is 3.
func sampleStepEnd() StepManifest { return EndOfRunMarker("r1", 3, t0) }

// sampleAdvantagesV2 is sampleAdvantages with the v2 columns: staleness 2 on every row but the
// last, whose staleness is unknown, and the single graded rollout of g5 masked as stale.
func sampleAdvantagesV2() []AdvantageRow {
	rows := sampleAdvantages()
	for i := range rows[:len(rows)-1] {
		rows[i].Staleness, rows[i].StalenessOK = 2, true
	}
	rows[len(rows)-2].MaskReason = MaskStale
	return rows
}

// calibrationJSON is s as JSON under oracleCalibrationSchema, for the tests of the JSON decoder
// on that shape (snapshots themselves are binary); decodeCalibrationJSON reads it back.
func calibrationJSON(s CalibrationSnapshot) ([]byte, error) {
	s.Schema = oracleCalibrationSchema
	return json.Marshal(&s)
}

func decodeCalibrationJSON(b []byte) error {
	var s CalibrationSnapshot
	return decodeJSON(b, "calibration", oracleCalibrationSchema, &s)
}

// sampleCalibrationDebias is sampleCalibration with the debias effect.
func sampleCalibrationDebias() CalibrationSnapshot {
	s := sampleCalibration()
	s.Debias = &DebiasShift{Rows: 45, Groups: 6, Reordered: 2, Flattened: 1, MeanShift: 0.0390625}
	return s
}

// sampleCalibrationGate is a snapshot with both optional blocks: the debias effect and a closed
// trust gate (wmrl correct --trust-gate).
func sampleCalibrationGate() CalibrationSnapshot {
	s := sampleCalibrationDebias()
	s.Gate = &TrustGate{Closed: true, Pairs: 108, Rho: 0.048, Lo: -0.14, Hi: 0.23}
	return s
}

func sampleCalibrationEnd() CalibrationEnd {
	return CalibrationEnd{RunID: "r1", LastStep: 499, EndedAt: t0, Reason: EndReasonMarker}
}
