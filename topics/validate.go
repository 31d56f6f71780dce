package topics

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits enforced by Validate. They are part of the wire contract: the Python client checks the
// same numbers.
const (
	// ScoreMin and ScoreMax bound every score (predicted, executed, calibrated, used): tasks
	// normalise their metric to [0,1] so that calibration and advantages share one scale.
	ScoreMin = 0.0
	ScoreMax = 1.0
	// MaxIDLen bounds run, stream, group and rollout ids; they become Kafka keys and Redis keys.
	MaxIDLen = 128
	// MaxLabelLen bounds free-form short labels (policy_version, model, config_hash, digest, meta
	// keys).
	MaxLabelLen = 256
	// maxSettingsLen bounds a calibration snapshot's settings text (about 400 bytes today).
	maxSettingsLen = 4096
	// MaxReasonLen bounds failure reasons and meta values.
	MaxReasonLen = 4096
	// MaxStderrTail bounds the sandbox's captured stderr tail.
	MaxStderrTail = 64 << 10
	// MaxMetaEntries bounds Rollout.Meta.
	MaxMetaEntries = 64
	// MaxGroupSize bounds G, the rollouts per group.
	MaxGroupSize = 1024
	// MaxGroupsPerStep bounds the groups of one step manifest.
	MaxGroupsPerStep = 4096
	// MaxInlineArtifact bounds Rollout.Artifact; anything larger must travel by reference
	// (ArtifactURI + ArtifactSHA256), because the record must stay below the broker's limit.
	MaxInlineArtifact = 512 << 10
	// MaxBreakpoints bounds the calibration fit's breakpoints (the window holds at most a few
	// thousand pairs, and ties are pooled).
	MaxBreakpoints = 16384
)

// ValidID reports whether s is a valid id: 1..MaxIDLen bytes of ASCII letters, digits and
// `. _ - : @ +`. In particular '/' is excluded because calibration keys are `run_id/stream` and
// Redis keys embed ids, and '{' '}' are excluded because Redis Cluster hash tags use them.
func ValidID(s string) bool {
	return checkID(s) == ""
}

func checkID(s string) string {
	if s == "" {
		return "required"
	}
	if len(s) > MaxIDLen {
		return fmt.Sprintf("longer than %d bytes", MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if !idByte[s[i]] {
			return fmt.Sprintf("character %q at byte %d not allowed in an id (allowed: A-Z a-z 0-9 . _ - : @ +)", rune(s[i]), i)
		}
	}
	return ""
}

// idByte marks the bytes an id may hold; a table, because every id of every record is checked.
var idByte = func() (t [256]bool) {
	for c := range 256 {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			t[c] = true
		case c == '.', c == '_', c == '-', c == ':', c == '@', c == '+':
			t[c] = true
		}
	}
	return t
}()

// checkText checks an optional free-form string: valid UTF-8, no control characters except
// tab/newline when multiline, at most max bytes.
func checkText(s string, max int, multiline bool) string {
	if len(s) > max {
		return fmt.Sprintf("longer than %d bytes", max)
	}
	if printableASCII(s) {
		return ""
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for i, r := range s {
		if unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t' || r == '\r')) {
			return fmt.Sprintf("control character %q at byte %d", r, i)
		}
	}
	return ""
}

// printableASCII is checkText's fast path: the labels and ids of nearly every record are plain
// printable ASCII, which needs neither UTF-8 decoding nor a Unicode table.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// checker accumulates the first failure of a record's validation; the rules read as a list.
type checker struct {
	// kind and kv name the record; the name is rendered only when a rule fails, so validating a
	// good record allocates nothing for it.
	kind string
	kv   [4]string
	err  *FieldError
}

func (c *checker) fail(field string, value any, cause error, format string, args ...any) {
	if c.err == nil {
		c.err = &FieldError{Record: recordName(c.kind, c.kv[:]...), Field: field, Value: value, Reason: fmt.Sprintf(format, args...), Err: cause}
	}
}

func (c *checker) result() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

func (c *checker) id(field, v string) {
	if msg := checkID(v); msg != "" {
		var shown any
		if v != "" {
			shown = v
		}
		c.fail(field, shown, nil, "%s", msg)
	}
}

func (c *checker) text(field, v string, max int, multiline bool) {
	if msg := checkText(v, max, multiline); msg != "" {
		c.fail(field, v, nil, "%s", msg)
	}
}

func (c *checker) schema(got, want string) {
	if got != want {
		var shown any
		if got != "" {
			shown = got
		}
		c.fail("schema", shown, ErrUnknownSchema, "want %q", want)
	}
}

func (c *checker) step(v int64) {
	if v < 0 {
		c.fail("step", v, nil, "must be >= 0")
	}
}

func (c *checker) finite(field string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		c.fail(field, v, nil, "not a finite number")
		return false
	}
	return true
}

func (c *checker) score(field string, v float64) {
	if c.finite(field, v) && (v < ScoreMin || v > ScoreMax) {
		c.fail(field, v, nil, "out of range [%g,%g]", ScoreMin, ScoreMax)
	}
}

func (c *checker) nonNegative(field string, v float64) {
	if c.finite(field, v) && v < 0 {
		c.fail(field, v, nil, "must be >= 0")
	}
}

func (c *checker) status(v Status) {
	switch v {
	case StatusOK, StatusTimeout, StatusError, StatusInvalid:
	default:
		var shown any
		if v != "" {
			shown = v
		}
		c.fail("status", shown, nil, "must be one of ok, timeout, error, invalid")
	}
}

// recordName renders `<kind> run=<run> <idname>=<id>` for error messages; ids that are not valid
// are quoted so hostile bytes cannot forge log lines.
func recordName(kind string, kv ...string) string {
	s := kind
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		if v == "" {
			continue
		}
		if !ValidID(v) {
			v = showValue(v)
		}
		s += " " + kv[i] + "=" + v
	}
	return s
}

// Validate checks a rollout against the wire contract; the error is a *FieldError naming the
// first bad field.
func (r *Rollout) Validate() error {
	c := checker{kind: "rollout", kv: [4]string{"run", r.RunID, "rollout", r.RolloutID}}
	c.schema(r.Schema, SchemaRollout)
	c.id("run_id", r.RunID)
	c.step(r.Step)
	c.id("group_id", r.GroupID)
	c.id("rollout_id", r.RolloutID)
	c.id("stream", r.Stream)
	c.text("policy_version", r.PolicyVersion, MaxLabelLen, false)
	if r.Index < 0 || r.Index >= MaxGroupSize {
		c.fail("index", r.Index, nil, "must be in [0,%d)", MaxGroupSize)
	}
	if len(r.Artifact) > MaxInlineArtifact {
		c.fail("artifact", r.Artifact, ErrTooLarge, "inline artifact over %d bytes: send it by reference (artifact_uri)", MaxInlineArtifact)
	}
	if r.Artifact != "" && r.ArtifactURI != "" {
		c.fail("artifact_uri", r.ArtifactURI, nil, "artifact and artifact_uri are exclusive")
	}
	if r.ArtifactURI != "" {
		c.text("artifact_uri", r.ArtifactURI, MaxReasonLen, false)
		if u, err := url.Parse(r.ArtifactURI); err != nil || u.Scheme == "" {
			c.fail("artifact_uri", r.ArtifactURI, nil, "not an absolute URI")
		}
		if r.ArtifactSHA256 == "" {
			c.fail("artifact_sha256", nil, nil, "required when artifact_uri is set")
		}
	}
	if r.ArtifactSHA256 != "" {
		if !isLowerHex(r.ArtifactSHA256, sha256.Size*2) {
			c.fail("artifact_sha256", r.ArtifactSHA256, nil, "want 64 lowercase hex digits")
		} else if r.Artifact != "" {
			sum := sha256.Sum256([]byte(r.Artifact))
			if hex.EncodeToString(sum[:]) != r.ArtifactSHA256 {
				c.fail("artifact_sha256", r.ArtifactSHA256, nil, "does not match the inline artifact")
			}
		}
	}
	if r.ArtifactSize < 0 {
		c.fail("artifact_size", r.ArtifactSize, nil, "must be >= 0")
	} else if r.Artifact != "" && r.ArtifactSize != 0 && r.ArtifactSize != int64(len(r.Artifact)) {
		c.fail("artifact_size", r.ArtifactSize, nil, "inline artifact has %d bytes", len(r.Artifact))
	}
	if len(r.Meta) > MaxMetaEntries {
		c.fail("meta", len(r.Meta), nil, "more than %d entries", MaxMetaEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Meta)) {
		if k == "" {
			c.fail("meta", nil, nil, "empty key")
		}
		c.text("meta", k, MaxLabelLen, false)
		c.text("meta."+k, r.Meta[k], MaxReasonLen, true)
	}
	return c.result()
}

// Validate checks a step manifest: at least one group, unique group ids, sizes in
// [1,MaxGroupSize]. An end-of-run record (EndOfRun) has no groups and no policy_step.
func (m *StepManifest) Validate() error {
	if m.EndOfRun {
		return m.validateEnd()
	}
	c := checker{kind: "step", kv: [4]string{"run", m.RunID, "step", strconv.FormatInt(m.Step, 10)}}
	c.schema(m.Schema, SchemaStep)
	c.id("run_id", m.RunID)
	c.step(m.Step)
	c.text("policy_version", m.PolicyVersion, MaxLabelLen, false)
	if m.PolicyStep != nil && (*m.PolicyStep < 0 || *m.PolicyStep > m.Step) {
		c.fail("policy_step", *m.PolicyStep, nil, "must be in [0,step]: a step is trained on rollouts of its own or an earlier policy")
	}
	if len(m.Groups) == 0 {
		c.fail("groups", nil, nil, "at least one group required")
	}
	if len(m.Groups) > MaxGroupsPerStep {
		c.fail("groups", len(m.Groups), nil, "more than %d groups", MaxGroupsPerStep)
	}
	seen := make(map[string]int, len(m.Groups))
	for i, g := range m.Groups {
		p := fmt.Sprintf("groups[%d].", i)
		c.id(p+"group_id", g.GroupID)
		if j, dup := seen[g.GroupID]; dup {
			c.fail(p+"group_id", g.GroupID, nil, "duplicate of groups[%d]", j)
		}
		seen[g.GroupID] = i
		c.id(p+"stream", g.Stream)
		if g.Size < 1 || g.Size > MaxGroupSize {
			c.fail(p+"size", g.Size, nil, "must be in [1,%d]", MaxGroupSize)
		}
	}
	return c.result()
}

// validateEnd checks an end-of-run record: a run id, its last step, nothing else.
func (m *StepManifest) validateEnd() error {
	c := checker{kind: "step", kv: [4]string{"run", m.RunID, "step", strconv.FormatInt(m.Step, 10)}}
	c.schema(m.Schema, SchemaStep)
	c.id("run_id", m.RunID)
	c.step(m.Step)
	c.text("policy_version", m.PolicyVersion, MaxLabelLen, false)
	if m.PolicyStep != nil {
		c.fail("policy_step", *m.PolicyStep, nil, "must be absent in an end-of-run record")
	}
	if len(m.Groups) != 0 {
		c.fail("groups", len(m.Groups), nil, "must be empty in an end-of-run record")
	}
	return c.result()
}

// checkScore applies "score is present iff status is ok" (allowImputed relaxes it for executed
// rewards) and "a failure carries a reason".
func (c *checker) scoreStatus(score *float64, status Status, reason string, imputed bool) {
	c.status(status)
	switch {
	case status == StatusOK && imputed:
		c.fail("imputed", true, nil, "an imputed score needs a failure status, not ok")
	case status == StatusOK && score == nil:
		c.fail("score", nil, nil, "required when status is ok")
	case status != StatusOK && imputed && score == nil:
		c.fail("score", nil, nil, "required when imputed is set")
	case status != StatusOK && !imputed && score != nil:
		c.fail("score", *score, nil, "must be absent when status is %s (set imputed to record a policy score)", status)
	}
	if score != nil {
		c.score("score", *score)
	}
	if status != StatusOK && reason == "" {
		c.fail("reason", nil, nil, "required when status is %s", status)
	}
	c.text("reason", reason, MaxReasonLen, true)
}

// Validate checks a world-model reward: score present iff status is ok, finite, in
// [ScoreMin,ScoreMax]; failures carry a reason.
func (p *PredictedReward) Validate() error {
	c := checker{kind: "predicted", kv: [4]string{"run", p.RunID, "rollout", p.RolloutID}}
	c.schema(p.Schema, SchemaPredicted)
	c.ref(&p.RolloutRef)
	c.scoreStatus(p.Score, p.Status, p.Reason, false)
	c.text("model", p.Model, MaxLabelLen, false)
	if p.Attempts < 0 {
		c.fail("attempts", p.Attempts, nil, "must be >= 0")
	}
	c.nonNegative("latency_ms", p.LatencyMS)
	return c.result()
}

// ref checks the rollout reference of a reward.
func (c *checker) ref(r *RolloutRef) {
	c.id("run_id", r.RunID)
	c.step(r.Step)
	c.id("group_id", r.GroupID)
	c.id("rollout_id", r.RolloutID)
	c.id("stream", r.Stream)
	c.text("policy_version", r.PolicyVersion, MaxLabelLen, false)
}

// Validate checks a sandbox reward: score present iff status is ok, or imputed with a failure
// status (then score and reason are both required).
func (e *ExecutedReward) Validate() error {
	c := checker{kind: "executed", kv: [4]string{"run", e.RunID, "rollout", e.RolloutID}}
	c.schema(e.Schema, SchemaExecuted)
	c.ref(&e.RolloutRef)
	c.scoreStatus(e.Score, e.Status, e.Reason, e.Imputed)
	c.nonNegative("duration_ms", e.DurationMS)
	c.text("stderr_tail", e.StderrTail, MaxStderrTail, true)
	return c.result()
}

// Validate checks a calibration snapshot: ids, a content digest, finite numbers, and a monotone
// fit (break_x and break_y of equal length, both non-decreasing, within [ScoreMin,ScoreMax]).
func (s *CalibrationSnapshot) Validate() error {
	c := checker{kind: "calibration", kv: [4]string{"run", s.RunID, "stream", s.Stream}}
	c.schema(s.Schema, SchemaCalibration)
	c.id("run_id", s.RunID)
	c.id("stream", s.Stream)
	c.step(s.Step)
	if s.Pairs < 0 {
		c.fail("pairs", s.Pairs, nil, "must be >= 0")
	}
	if s.StepPairs < 0 {
		c.fail("step_pairs", s.StepPairs, nil, "must be >= 0")
	}
	c.text("config_hash", s.ConfigHash, MaxLabelLen, false)
	c.text("settings", s.Settings, maxSettingsLen, false)
	if s.Digest == "" {
		c.fail("digest", nil, nil, "required")
	}
	c.text("digest", s.Digest, MaxLabelLen, false)
	if len(s.BreakX) != len(s.BreakY) {
		c.fail("break_y", len(s.BreakY), nil, "length differs from break_x (%d)", len(s.BreakX))
	}
	if len(s.BreakX) > MaxBreakpoints {
		c.fail("break_x", len(s.BreakX), nil, "more than %d breakpoints", MaxBreakpoints)
	}
	c.monotone("break_x", s.BreakX)
	c.monotone("break_y", s.BreakY)
	c.nonNegative("anchor_weight", s.AnchorWeight)
	c.finite("bias_before", s.BiasBefore)
	c.finite("bias_after", s.BiasAfter)
	if d := s.Debias; d != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"debias.rows", d.Rows}, {"debias.groups", d.Groups}, {"debias.reordered", d.Reordered}, {"debias.flattened", d.Flattened}} {
			if f.v < 0 || f.v > math.MaxInt32 {
				c.fail(f.name, f.v, nil, "not in [0, %d]", math.MaxInt32)
			}
		}
		if d.Reordered > d.Groups {
			c.fail("debias.reordered", d.Reordered, nil, "exceeds groups (%d)", d.Groups)
		}
		if d.Flattened > d.Reordered {
			c.fail("debias.flattened", d.Flattened, nil, "exceeds reordered (%d)", d.Reordered)
		}
		c.nonNegative("debias.mean_shift", d.MeanShift)
	}
	if g := s.Gate; g != nil {
		if g.Pairs < 0 || g.Pairs > math.MaxInt32 {
			c.fail("gate.pairs", g.Pairs, nil, "not in [0, %d]", math.MaxInt32)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"gate.rho", g.Rho}, {"gate.lo", g.Lo}, {"gate.hi", g.Hi}} {
			if !(f.v >= -1 && f.v <= 1) {
				c.fail(f.name, f.v, nil, "not in [-1, 1]")
			}
		}
	}
	return c.result()
}

func (c *checker) monotone(field string, xs []float64) {
	for i, x := range xs {
		f := fmt.Sprintf("%s[%d]", field, i)
		c.score(f, x)
		if i > 0 && x < xs[i-1] {
			c.fail(f, x, nil, "decreases (previous %g)", xs[i-1])
		}
	}
}

// Validate checks one advantage row. Rules beyond ids and finiteness: a missing reward
// (PredictedOK/ExecutedOK false) has value 0, so that Arrow's null and JSON's 0 agree; an
// unmasked row (Mask true) has a source whose reward is present; a masked row (Mask false) has
// advantage 0, so a trainer that ignores the mask still adds nothing for it; a staleness is >= 0
// and 0 when unknown; a mask reason belongs to a masked row.
func (a *AdvantageRow) Validate() error {
	c := checker{kind: "advantage", kv: [4]string{"run", a.RunID, "rollout", a.RolloutID}}
	c.id("run_id", a.RunID)
	c.id("stream", a.Stream)
	c.step(a.Step)
	c.id("group_id", a.GroupID)
	c.id("rollout_id", a.RolloutID)
	c.text("policy_version", a.PolicyVersion, MaxLabelLen, false)
	switch a.Source {
	case SourceAnchor, SourceWorldModel:
	case "":
		if a.Mask {
			c.fail("source", nil, nil, "required for an unmasked row")
		}
	default:
		c.fail("source", a.Source, nil, "must be anchor or world_model")
	}
	c.optionalScore("predicted", a.Predicted, a.PredictedOK)
	c.optionalScore("executed", a.Executed, a.ExecutedOK)
	c.score("calibrated", a.Calibrated)
	c.score("used", a.Used)
	c.finite("advantage", a.Advantage)
	c.nonNegative("weight", a.Weight)
	if !a.Mask {
		if a.Advantage != 0 {
			c.fail("advantage", a.Advantage, nil, "must be 0 for a masked row")
		}
	} else {
		if a.Source == SourceAnchor && !a.ExecutedOK {
			c.fail("executed_ok", false, nil, "an unmasked anchor row needs an executed score")
		}
		if a.Source == SourceWorldModel && !a.PredictedOK {
			c.fail("predicted_ok", false, nil, "an unmasked world_model row needs a predicted score")
		}
	}
	switch {
	case !a.StalenessOK && a.Staleness != 0:
		c.fail("staleness", a.Staleness, nil, "must be 0 when staleness_ok is false")
	case a.Staleness < 0:
		c.fail("staleness", a.Staleness, nil, "must be >= 0")
	}
	switch a.MaskReason {
	case "":
	case MaskStale:
		if a.Mask {
			c.fail("mask_reason", a.MaskReason, nil, "only a masked row has a mask reason")
		} else if !a.StalenessOK {
			c.fail("mask_reason", a.MaskReason, nil, "a row masked as stale needs a staleness")
		}
	default:
		c.fail("mask_reason", a.MaskReason, nil, "must be empty or %q", MaskStale)
	}
	return c.result()
}

func (c *checker) optionalScore(field string, v float64, ok bool) {
	if ok {
		c.score(field, v)
	} else if v != 0 || math.Signbit(v) {
		c.fail(field, v, nil, "must be 0 when %s_ok is false", field)
	}
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
