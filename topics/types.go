package topics

import "time"

// Schema identifiers carried in the `schema` field of every JSON record and in the wmrl-schema
// header. A reader rejects any schema it does not know instead of guessing at its fields.
const (
	SchemaRollout     = "wmrl.rollout.v1"
	SchemaStep        = "wmrl.step.v1"
	SchemaPredicted   = "wmrl.reward.predicted.v1"
	SchemaExecuted    = "wmrl.reward.executed.v1"
	SchemaAdvantages  = "wmrl.advantages.v1"
	SchemaCalibration = "wmrl.calibration.v1"
)

// Status is the outcome of scoring one rollout. Every rollout gets exactly one reward record per
// stage that handles it, so failure is always explicit and never encoded by absence.
type Status string

const (
	StatusOK      Status = "ok"
	StatusTimeout Status = "timeout"
	StatusError   Status = "error"
	StatusInvalid Status = "invalid"
)

// Source says which reward an advantage row used.
type Source string

const (
	SourceAnchor     Source = "anchor"
	SourceWorldModel Source = "world_model"
)

// Rollout is one sampled trajectory of a group. Key: run_id. Topic: rollouts.
type Rollout struct {
	// Schema is SchemaRollout; EncodeRollout fills it when empty.
	Schema string `json:"schema"`
	// RunID, GroupID, RolloutID and Stream are ids (see ValidID). Stream names the task
	// distribution the rollout belongs to; calibration is kept per (run, stream).
	RunID string `json:"run_id"`
	// Step is the training step (>= 0) whose policy produced the rollout.
	Step      int64  `json:"step"`
	GroupID   string `json:"group_id"`
	RolloutID string `json:"rollout_id"`
	Stream    string `json:"stream"`
	// PolicyVersion is a free-form label of the policy checkpoint (optional, <= MaxLabelLen).
	PolicyVersion string `json:"policy_version"`
	// Anchor is decided once by the generator (IsAnchor) and copied to the manifest.
	Anchor bool `json:"anchor"`
	// Index is the rollout's position within its group, 0..size-1.
	Index  int    `json:"index"`
	Prompt string `json:"prompt,omitempty"`
	// Artifact is the rollout's output (completion text, solution config) when it fits inline
	// (<= MaxInlineArtifact); larger artifacts travel by reference in ArtifactURI (claim check),
	// which then requires ArtifactSHA256. Artifact and ArtifactURI are exclusive; both may be
	// empty. ArtifactSHA256 is 64 lowercase hex digits and, with an inline artifact, must match it.
	Artifact       string `json:"artifact,omitempty"`
	ArtifactURI    string `json:"artifact_uri,omitempty"`
	ArtifactSHA256 string `json:"artifact_sha256,omitempty"`
	// ArtifactSize is the artifact's length in bytes (optional; must match an inline artifact).
	ArtifactSize int64 `json:"artifact_size,omitempty"`
	// Meta carries generator-specific labels (<= MaxMetaEntries). Decoding turns {} into nil.
	Meta map[string]string `json:"meta,omitempty"`
	// CreatedAt is informational; no correction result depends on wall-clock time.
	CreatedAt time.Time `json:"created_at"`
}

// GroupManifest describes one group of a step.
type GroupManifest struct {
	GroupID string `json:"group_id"`
	Stream  string `json:"stream"`
	// Size is the number of rollouts in the group, G, in [1,MaxGroupSize].
	Size int `json:"size"`
	// Anchor says the group is also executed in the sandbox (IsAnchor at generation time).
	Anchor bool `json:"anchor"`
}

// StepManifest lists a training step's groups so the correction consumer can decide when the step
// is complete. Key: run_id. Topic: steps.
type StepManifest struct {
	Schema        string          `json:"schema"`
	RunID         string          `json:"run_id"`
	Step          int64           `json:"step"`
	PolicyVersion string          `json:"policy_version"`
	Groups        []GroupManifest `json:"groups"`
	CreatedAt     time.Time       `json:"created_at"`
}

// PredictedReward is the world model's score for one rollout. Score is present iff Status is ok.
// Key: run_id. Topic: rewards.predicted.
type PredictedReward struct {
	Schema        string `json:"schema"`
	RunID         string `json:"run_id"`
	Step          int64  `json:"step"`
	GroupID       string `json:"group_id"`
	RolloutID     string `json:"rollout_id"`
	Stream        string `json:"stream"`
	PolicyVersion string `json:"policy_version"`
	Anchor        bool   `json:"anchor"`
	// Score is in [ScoreMin,ScoreMax]; nil (absent in JSON) unless Status is ok.
	Score  *float64 `json:"score,omitempty"`
	Status Status   `json:"status"`
	// Reason explains a failure; required when Status is not ok.
	Reason string `json:"reason,omitempty"`
	// Model, Attempts and LatencyMS describe the scoring call (informational).
	Model     string    `json:"model,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	LatencyMS float64   `json:"latency_ms,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// ExecutedReward is the sandbox's real score for one anchor rollout. Score is present iff Status
// is ok, or when Imputed is set: the --on-timeout=zero policy records the true failure status and
// an imputed score of 0, which reproduces the authors' reference. Key: run_id. Topic:
// rewards.executed.
type ExecutedReward struct {
	Schema        string `json:"schema"`
	RunID         string `json:"run_id"`
	Step          int64  `json:"step"`
	GroupID       string `json:"group_id"`
	RolloutID     string `json:"rollout_id"`
	Stream        string `json:"stream"`
	PolicyVersion string `json:"policy_version"`
	// Score is in [ScoreMin,ScoreMax]; present iff Status is ok or Imputed is set.
	Score *float64 `json:"score,omitempty"`
	// Imputed marks a policy score for a failed execution; it requires a non-ok Status.
	Imputed bool   `json:"imputed,omitempty"`
	Status  Status `json:"status"`
	// Reason explains a failure; required when Status is not ok.
	Reason string `json:"reason,omitempty"`
	// ExitCode, DurationMS and StderrTail (<= MaxStderrTail) describe the sandbox run.
	ExitCode   int       `json:"exit_code,omitempty"`
	DurationMS float64   `json:"duration_ms,omitempty"`
	StderrTail string    `json:"stderr_tail,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// AdvantageRow is one rollout's fused advantage. Rows travel as Arrow IPC record batches (one
// stream per chunk) on the advantages topic; Predicted and Executed are null in Arrow when their
// OK flag is false. Rows carry no wall-clock fields so that a replay reproduces them bit-for-bit.
type AdvantageRow struct {
	RunID         string `json:"run_id"`
	Stream        string `json:"stream"`
	Step          int64  `json:"step"`
	GroupID       string `json:"group_id"`
	RolloutID     string `json:"rollout_id"`
	PolicyVersion string `json:"policy_version"`
	// Source says which reward Used is: the executed score (anchor) or the calibrated world-model
	// score (world_model). It may be empty only for a masked row (Mask false).
	Source Source `json:"source"`
	// Predicted is the raw world-model score; 0 and PredictedOK false when there is none.
	Predicted   float64 `json:"predicted"`
	PredictedOK bool    `json:"predicted_ok"`
	// Calibrated is f̂(Predicted), the Online-Debiasing map in force for the step.
	Calibrated float64 `json:"calibrated"`
	// Executed is the sandbox score; 0 and ExecutedOK false when there is none.
	Executed   float64 `json:"executed"`
	ExecutedOK bool    `json:"executed_ok"`
	// Used is the reward that entered the advantage, in [ScoreMin,ScoreMax].
	Used float64 `json:"used"`
	// Advantage is the group-relative advantage; 0 for a masked row.
	Advantage float64 `json:"advantage"`
	// Weight is the inverse-variance (IVD) weight of the row in the loss, >= 0.
	Weight float64 `json:"weight"`
	// Mask is the trainer's loss mask, as in correction.Row: true means the row counts; false
	// means it is masked out (no graded reward, or its group had fewer than two graded rollouts),
	// with advantage 0 so a trainer that ignores the mask still adds nothing for it.
	Mask bool `json:"mask"`
	// CalibrationVersion is the FitVersion of the calibration used for the step.
	CalibrationVersion uint64 `json:"calibration_version"`
}

// CalibrationSnapshot is the changelog of the correction state for one (run, stream), sealed after
// Step. Key: run_id/stream on the compacted calibration topic, so the latest snapshot per stream
// survives compaction and state can be rebuilt when Redis is empty.
type CalibrationSnapshot struct {
	Schema string `json:"schema"`
	RunID  string `json:"run_id"`
	Stream string `json:"stream"`
	Step   int64  `json:"step"`
	// FitVersion counts refits of the calibration map; advantage rows cite it.
	FitVersion uint64 `json:"fit_version"`
	// Pairs is the number of anchor pairs in the window.
	Pairs int `json:"pairs"`
	// ConfigHash identifies the correction configuration (optional label).
	ConfigHash string `json:"config_hash"`
	// Digest is the content address of the state (required); equal steps must give equal digests.
	Digest string `json:"digest"`
	// State is the opaque serialized correction state (base64 in JSON).
	State []byte `json:"state"`
	// BreakX and BreakY are the fit's breakpoints: equal length, non-decreasing, in
	// [ScoreMin,ScoreMax]. Decoding turns [] into nil.
	BreakX []float64 `json:"break_x,omitempty"`
	BreakY []float64 `json:"break_y,omitempty"`
	// AnchorWeight is the IVD weight of anchor rows for the next step, >= 0.
	AnchorWeight float64 `json:"anchor_weight"`
	// BiasBefore and BiasAfter are mean(predicted − executed) over this step's anchor pairs, raw and
	// after the calibration in force for the step; they show what Online Debiasing removed.
	BiasBefore float64   `json:"bias_before"`
	BiasAfter  float64   `json:"bias_after"`
	StepPairs  int       `json:"step_pairs"`
	CreatedAt  time.Time `json:"created_at"`
}
