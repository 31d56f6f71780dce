package topics

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// checkFieldErr asserts err is a *FieldError for field whose cause is want.
func checkFieldErr(t *testing.T, err error, field string, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error for field %q, got nil", field)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want *FieldError for %q, got %T: %v", field, err, err)
	}
	if fe.Field != field {
		t.Fatalf("error names field %q, want %q: %v", fe.Field, field, err)
	}
	if !strings.Contains(err.Error(), `field "`+field+`"`) {
		t.Fatalf("message does not name the field: %v", err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %v does not wrap %v", err, want)
	}
}

func TestValidSamples(t *testing.T) {
	for name, v := range map[string]validator{
		"rollout": ptrTo(sampleRollout()), "step": ptrTo(sampleStep()), "predicted": ptrTo(samplePredicted()),
		"executed": ptrTo(sampleExecuted()), "imputed": ptrTo(sampleImputed()), "calibration": ptrTo(sampleCalibration()),
	} {
		if err := v.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := ValidateAdvantages(sampleAdvantages()); err != nil {
		t.Error(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestValidateRollout(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Rollout)
		field string
		cause error
	}{
		{"missing run", func(r *Rollout) { r.RunID = "" }, "run_id", ErrInvalid},
		{"slash in run", func(r *Rollout) { r.RunID = "a/b" }, "run_id", ErrInvalid},
		{"brace in run", func(r *Rollout) { r.RunID = "{r1}" }, "run_id", ErrInvalid},
		{"long run", func(r *Rollout) { r.RunID = strings.Repeat("a", MaxIDLen+1) }, "run_id", ErrInvalid},
		{"missing group", func(r *Rollout) { r.GroupID = "" }, "group_id", ErrInvalid},
		{"missing rollout", func(r *Rollout) { r.RolloutID = "" }, "rollout_id", ErrInvalid},
		{"space in rollout", func(r *Rollout) { r.RolloutID = "g3 r2" }, "rollout_id", ErrInvalid},
		{"missing stream", func(r *Rollout) { r.Stream = "" }, "stream", ErrInvalid},
		{"negative step", func(r *Rollout) { r.Step = -1 }, "step", ErrInvalid},
		{"wrong schema", func(r *Rollout) { r.Schema = SchemaStep }, "schema", ErrUnknownSchema},
		{"missing schema", func(r *Rollout) { r.Schema = "" }, "schema", ErrUnknownSchema},
		{"negative index", func(r *Rollout) { r.Index = -1 }, "index", ErrInvalid},
		{"index too big", func(r *Rollout) { r.Index = MaxGroupSize }, "index", ErrInvalid},
		{"control in policy", func(r *Rollout) { r.PolicyVersion = "a\nb" }, "policy_version", ErrInvalid},
		{"huge artifact", func(r *Rollout) { r.Artifact, r.ArtifactSize = strings.Repeat("x", MaxInlineArtifact+1), 0 }, "artifact", ErrTooLarge},
		{"artifact and uri", func(r *Rollout) { r.ArtifactURI = "s3://b/k" }, "artifact_uri", ErrInvalid},
		{"uri without sha", func(r *Rollout) { r.Artifact, r.ArtifactSize, r.ArtifactURI = "", 0, "s3://b/k" }, "artifact_sha256", ErrInvalid},
		{"relative uri", func(r *Rollout) {
			r.Artifact, r.ArtifactURI, r.ArtifactSHA256 = "", "b/k", strings.Repeat("a", 64)
		}, "artifact_uri", ErrInvalid},
		{"bad sha", func(r *Rollout) { r.ArtifactSHA256 = "ABC" }, "artifact_sha256", ErrInvalid},
		{"sha mismatch", func(r *Rollout) { r.ArtifactSHA256 = strings.Repeat("0", 64) }, "artifact_sha256", ErrInvalid},
		{"size mismatch", func(r *Rollout) { r.ArtifactSize = 3 }, "artifact_size", ErrInvalid},
		{"negative size", func(r *Rollout) { r.ArtifactSize = -3 }, "artifact_size", ErrInvalid},
		{"empty meta key", func(r *Rollout) { r.Meta[""] = "x" }, "meta", ErrInvalid},
		{"bad meta value", func(r *Rollout) { r.Meta["task"] = "a\x00b" }, "meta.task", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sampleRollout()
			tt.mod(&r)
			checkFieldErr(t, r.Validate(), tt.field, tt.cause)
		})
	}
	r := sampleRollout()
	r.Artifact, r.ArtifactSize, r.ArtifactURI, r.ArtifactSHA256 = "", 1<<30, "s3://bucket/run/g3-r2.tar", strings.Repeat("ab", 32)
	if err := r.Validate(); err != nil {
		t.Errorf("by-reference artifact: %v", err)
	}
}

func TestValidateStep(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*StepManifest)
		field string
	}{
		{"missing run", func(m *StepManifest) { m.RunID = "" }, "run_id"},
		{"negative step", func(m *StepManifest) { m.Step = -2 }, "step"},
		{"no groups", func(m *StepManifest) { m.Groups = nil }, "groups"},
		{"duplicate group", func(m *StepManifest) { m.Groups[2].GroupID = "g0" }, "groups[2].group_id"},
		{"missing group id", func(m *StepManifest) { m.Groups[1].GroupID = "" }, "groups[1].group_id"},
		{"missing stream", func(m *StepManifest) { m.Groups[0].Stream = "" }, "groups[0].stream"},
		{"zero size", func(m *StepManifest) { m.Groups[1].Size = 0 }, "groups[1].size"},
		{"huge size", func(m *StepManifest) { m.Groups[1].Size = MaxGroupSize + 1 }, "groups[1].size"},
		{"too many groups", func(m *StepManifest) {
			m.Groups = make([]GroupManifest, MaxGroupsPerStep+1)
		}, "groups"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sampleStep()
			tt.mod(&m)
			checkFieldErr(t, m.Validate(), tt.field, ErrInvalid)
		})
	}
}

func TestValidatePredicted(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*PredictedReward)
		field string
	}{
		{"NaN score", func(p *PredictedReward) { p.Score = ptr(math.NaN()) }, "score"},
		{"Inf score", func(p *PredictedReward) { p.Score = ptr(math.Inf(1)) }, "score"},
		{"score above 1", func(p *PredictedReward) { p.Score = ptr(1.0000001) }, "score"},
		{"score below 0", func(p *PredictedReward) { p.Score = ptr(-0.1) }, "score"},
		{"ok without score", func(p *PredictedReward) { p.Score = nil }, "score"},
		{"failure with score", func(p *PredictedReward) { p.Status, p.Reason = StatusError, "429" }, "score"},
		{"failure without reason", func(p *PredictedReward) { p.Status, p.Score = StatusTimeout, nil }, "reason"},
		{"unknown status", func(p *PredictedReward) { p.Status = "done" }, "status"},
		{"missing status", func(p *PredictedReward) { p.Status = "" }, "status"},
		{"missing rollout", func(p *PredictedReward) { p.RolloutID = "" }, "rollout_id"},
		{"negative attempts", func(p *PredictedReward) { p.Attempts = -1 }, "attempts"},
		{"NaN latency", func(p *PredictedReward) { p.LatencyMS = math.NaN() }, "latency_ms"},
		{"negative latency", func(p *PredictedReward) { p.LatencyMS = -1 }, "latency_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := samplePredicted()
			tt.mod(&p)
			checkFieldErr(t, p.Validate(), tt.field, ErrInvalid)
		})
	}
	p := samplePredicted()
	p.Score, p.Status, p.Reason = nil, StatusInvalid, "no score in reply"
	if err := p.Validate(); err != nil {
		t.Errorf("explicit failure: %v", err)
	}
}

func TestValidateExecuted(t *testing.T) {
	tests := []struct {
		name  string
		base  func() ExecutedReward
		mod   func(*ExecutedReward)
		field string
	}{
		{"NaN score", sampleExecuted, func(e *ExecutedReward) { e.Score = ptr(math.NaN()) }, "score"},
		{"score out of range", sampleExecuted, func(e *ExecutedReward) { e.Score = ptr(2) }, "score"},
		{"ok without score", sampleExecuted, func(e *ExecutedReward) { e.Score = nil }, "score"},
		{"imputed with ok", sampleExecuted, func(e *ExecutedReward) { e.Imputed = true }, "imputed"},
		{"imputed without score", sampleImputed, func(e *ExecutedReward) { e.Score = nil }, "score"},
		{"imputed without reason", sampleImputed, func(e *ExecutedReward) { e.Reason = "" }, "reason"},
		{"imputed out of range", sampleImputed, func(e *ExecutedReward) { e.Score = ptr(-1) }, "score"},
		{"failure with score, not imputed", sampleImputed, func(e *ExecutedReward) { e.Imputed = false }, "score"},
		{"negative duration", sampleExecuted, func(e *ExecutedReward) { e.DurationMS = -5 }, "duration_ms"},
		{"huge stderr", sampleExecuted, func(e *ExecutedReward) { e.StderrTail = strings.Repeat("e", MaxStderrTail+1) }, "stderr_tail"},
		{"bad group", sampleExecuted, func(e *ExecutedReward) { e.GroupID = "g/3" }, "group_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.base()
			tt.mod(&e)
			checkFieldErr(t, e.Validate(), tt.field, ErrInvalid)
		})
	}
}

func TestValidateCalibration(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*CalibrationSnapshot)
		field string
	}{
		{"missing stream", func(s *CalibrationSnapshot) { s.Stream = "" }, "stream"},
		{"missing digest", func(s *CalibrationSnapshot) { s.Digest = "" }, "digest"},
		{"negative pairs", func(s *CalibrationSnapshot) { s.Pairs = -1 }, "pairs"},
		{"negative step pairs", func(s *CalibrationSnapshot) { s.StepPairs = -1 }, "step_pairs"},
		{"length mismatch", func(s *CalibrationSnapshot) { s.BreakY = s.BreakY[:2] }, "break_y"},
		{"decreasing x", func(s *CalibrationSnapshot) { s.BreakX[2] = 0.3 }, "break_x[2]"},
		{"decreasing y", func(s *CalibrationSnapshot) { s.BreakY[1] = 0.05 }, "break_y[1]"},
		{"NaN y", func(s *CalibrationSnapshot) { s.BreakY[0] = math.NaN() }, "break_y[0]"},
		{"x out of range", func(s *CalibrationSnapshot) { s.BreakX[0] = -0.5 }, "break_x[0]"},
		{"Inf weight", func(s *CalibrationSnapshot) { s.AnchorWeight = math.Inf(1) }, "anchor_weight"},
		{"negative weight", func(s *CalibrationSnapshot) { s.AnchorWeight = -1 }, "anchor_weight"},
		{"NaN bias", func(s *CalibrationSnapshot) { s.BiasAfter = math.NaN() }, "bias_after"},
		{"gate rho above 1", func(s *CalibrationSnapshot) { s.Gate = &TrustGate{Pairs: 20, Rho: 1.5, Lo: -1, Hi: 1} }, "gate.rho"},
		{"gate NaN lo", func(s *CalibrationSnapshot) { s.Gate = &TrustGate{Pairs: 20, Lo: math.NaN(), Hi: 1} }, "gate.lo"},
		{"gate negative pairs", func(s *CalibrationSnapshot) { s.Gate = &TrustGate{Pairs: -1} }, "gate.pairs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sampleCalibration()
			tt.mod(&s)
			checkFieldErr(t, s.Validate(), tt.field, ErrInvalid)
		})
	}
}

func TestValidateAdvantages(t *testing.T) {
	tests := []struct {
		name  string
		row   int
		mod   func(*AdvantageRow)
		field string
		cause error
	}{
		{"missing run", 0, func(a *AdvantageRow) { a.RunID = "" }, "run_id", ErrInvalid},
		{"negative step", 0, func(a *AdvantageRow) { a.Step = -1 }, "step", ErrInvalid},
		{"unknown source", 0, func(a *AdvantageRow) { a.Source = "oracle" }, "source", ErrInvalid},
		{"unmasked without source", 0, func(a *AdvantageRow) { a.Source = "" }, "source", ErrInvalid},
		{"NaN advantage", 1, func(a *AdvantageRow) { a.Advantage = math.NaN() }, "advantage", ErrInvalid},
		{"Inf weight", 1, func(a *AdvantageRow) { a.Weight = math.Inf(-1) }, "weight", ErrInvalid},
		{"negative weight", 1, func(a *AdvantageRow) { a.Weight = -1 }, "weight", ErrInvalid},
		{"used out of range", 1, func(a *AdvantageRow) { a.Used = 1.5 }, "used", ErrInvalid},
		{"calibrated NaN", 1, func(a *AdvantageRow) { a.Calibrated = math.NaN() }, "calibrated", ErrInvalid},
		{"predicted out of range", 1, func(a *AdvantageRow) { a.Predicted = 7 }, "predicted", ErrInvalid},
		{"predicted value without ok", 4, func(a *AdvantageRow) { a.PredictedOK = false }, "predicted", ErrInvalid},
		{"executed value without ok", 4, func(a *AdvantageRow) { a.Executed = 0.5 }, "executed", ErrInvalid},
		{"anchor without executed", 1, func(a *AdvantageRow) { a.Executed, a.ExecutedOK = 0, false }, "executed_ok", ErrInvalid},
		{"world model without predicted", 4, func(a *AdvantageRow) { a.Predicted, a.PredictedOK = 0, false }, "predicted_ok", ErrInvalid},
		{"masked with advantage", 7, func(a *AdvantageRow) { a.Advantage = 0.5 }, "advantage", ErrInvalid},
		{"duplicate rollout", 3, func(a *AdvantageRow) { a.RolloutID = "g3-r0" }, "rollout_id", ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := sampleAdvantages()
			tt.mod(&rows[tt.row])
			err := ValidateAdvantages(rows)
			checkFieldErr(t, err, tt.field, tt.cause)
			if !strings.Contains(err.Error(), "row ") {
				t.Errorf("error does not name the row: %v", err)
			}
		})
	}
}

func TestFieldErrorMessage(t *testing.T) {
	p := samplePredicted()
	p.RunID, p.RolloutID, p.Score = "r1", "g3-r2", ptr(math.NaN())
	err := p.Validate()
	want := `predicted run=r1 rollout=g3-r2: field "score": value NaN: not a finite number`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	long := &FieldError{Field: "artifact", Value: strings.Repeat("é", 100), Reason: "x"}
	if got := long.Error(); len(got) > 120 || !strings.Contains(got, "(200 bytes)") {
		t.Errorf("long value not truncated: %s", got)
	}
	hostile := sampleRollout()
	hostile.RolloutID = "x\ny"
	if msg := hostile.Validate().Error(); strings.Contains(msg, "\n") {
		t.Errorf("message carries a raw newline: %q", msg)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&FieldError{Field: "score"}, "invalid-field:score"},
		{&FieldError{Field: "schema", Err: ErrUnknownSchema}, "unknown-schema"},
		{&FieldError{Field: "artifact", Err: ErrTooLarge}, "too-large"},
		{&FieldError{Field: "rollout_id", Err: ErrConflict}, "conflict"},
		{malformed("json", errors.New("x")), "malformed-json"},
		{malformed("arrow", errors.New("x")), "malformed-arrow"},
		{ErrMalformed, "malformed"},
		{ErrBadHeader, "bad-header"},
		{errors.New("boom"), "error"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestCalibrationGateRoundTrip: the trust gate block survives encoding; a snapshot without it
// encodes byte for byte as before the block existed (blocks byte 0 or 1).
func TestCalibrationGateRoundTrip(t *testing.T) {
	s := sampleCalibration()
	plain, err := EncodeCalibration(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Gate = &TrustGate{Closed: true, Pairs: 48, Rho: 0.05, Lo: -0.23, Hi: 0.33}
	b, err := EncodeCalibration(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCalibration(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Gate == nil || *got.Gate != *s.Gate {
		t.Fatalf("gate %+v, want %+v", got.Gate, s.Gate)
	}
	s.Gate = nil
	again, err := EncodeCalibration(s)
	if err != nil || string(again) != string(plain) || len(b) != len(plain)+1+4+3*8 {
		t.Fatalf("without the gate: %v, %d bytes vs %d; with it %d", err, len(again), len(plain), len(b))
	}
}
