package producers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/wmrl/wmrl/topics"
)

// DefaultMaxLineBytes bounds one JSONL line. Artifacts larger than the inline limit go by
// reference anyway, so lines of a few MiB are the most a sane producer writes.
const DefaultMaxLineBytes = 64 << 20

// JSONLine is the short JSONL form: one rollout per line. Only step and group_id are required.
//
//	{"step": 3, "group_id": "q17", "prompt": "…", "artifact": "…", "stream": "main",
//	 "rollout_id": "…", "policy_version": "ckpt-3", "meta": {"k": "v"},
//	 "artifact_uri": "file:///…", "artifact_sha256": "…", "artifact_size": 123}
//
// Lines with the same (step, group_id) form one group, in line order (index 0, 1, …). The
// published group id is "<step>-<group_id>" so that a task id may recur in every step; the
// rollout id is rollout_id verbatim, or "<step>-<group_id>-<i>". artifact is a JSON string
// (UTF-8 text); artifact_uri/artifact_sha256 pass an already stored artifact by reference.
// Every line of a group must agree on prompt and stream, and every line of a step on
// policy_version.
type JSONLine struct {
	Step           *int64 `json:"step"`
	GroupID        string `json:"group_id"`
	RolloutID      string `json:"rollout_id"`
	Prompt         string `json:"prompt"`
	Artifact       string `json:"artifact"`
	ArtifactURI    string `json:"artifact_uri"`
	ArtifactSHA256 string `json:"artifact_sha256"`
	ArtifactSize   int64  `json:"artifact_size"`
	Stream         string `json:"stream"`
	PolicyVersion  string `json:"policy_version"`
	// PolicyStep is the training step of the checkpoint that sampled the line (optional; equal
	// on every line of a step).
	PolicyStep *int64            `json:"policy_step"`
	Meta       map[string]string `json:"meta"`
}

// jsonLineKeys are the keys of the short form: JSONLine's json names.
var jsonLineKeys = func() map[string]bool {
	keys := map[string]bool{}
	for f := range reflect.TypeFor[JSONLine]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys[name] = true
	}
	return keys
}()

// JSONLConfig configures a JSONL backend.
type JSONLConfig struct {
	// RunID and AnchorFraction are the generator's: a full rollout record (the second line
	// form) must carry this run id and the anchor flag topics.IsAnchor gives, since the
	// generator cannot silently change a record it was given verbatim.
	RunID          string
	AnchorFraction float64
	// MaxLineBytes bounds a line (default DefaultMaxLineBytes).
	MaxLineBytes int
	// OnBadLine, when set, receives every line that does not parse or validate on its own (the
	// error wraps ErrLine; raw is only valid during the call) and the whole group the line names
	// (its step and group_id) is left out of its step, so one poison line neither stops the run
	// nor publishes its group short of a rollout; a non-nil return stops it. A bad line whose
	// step and group_id cannot be read stops the run all the same (its group is unknown). When
	// nil a bad line stops the run before anything of its step is published. Errors that involve
	// several lines (step order, groups that disagree) and lines over MaxLineBytes always stop it.
	OnBadLine func(line int, raw []byte, err error) error
}

// JSONL is the Backend over JSONL input (a file or stdin), so any external generator can pipe
// rollouts in. A line is either the short form (JSONLine) or a full rollout record (a
// topics.Rollout with "schema": "wmrl.rollout.v1", decoded strictly and published with its ids
// verbatim). Lines must come in non-decreasing step order; a step is emitted when a line of a
// later step arrives, or at EOF.
type JSONL struct {
	cfg     JSONLConfig
	sc      *bufio.Scanner
	line    int
	pending *parsedLine
	done    bool
	// dropped holds, per step, the groups left out for a bad line (OnBadLine); emitted is the
	// last step returned by Next (-1: none yet).
	dropped map[int64]map[string]bool
	emitted int64
	drops   []string
}

// NewJSONL reads from r.
func NewJSONL(r io.Reader, cfg JSONLConfig) (*JSONL, error) {
	if !topics.ValidID(cfg.RunID) {
		return nil, fmt.Errorf("%w: run id %q is not a valid id", ErrConfig, cfg.RunID)
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, cfg.MaxLineBytes)), cfg.MaxLineBytes)
	return &JSONL{cfg: cfg, sc: sc, dropped: map[int64]map[string]bool{}, emitted: -1}, nil
}

// DroppedGroups names the groups left out so far for bad lines (OnBadLine), as
// "step <n> group <id>", in the order they were dropped.
func (j *JSONL) DroppedGroups() []string { return j.drops }

// parsedLine is one rollout of the input with the group it belongs to.
type parsedLine struct {
	line          int
	step          int64
	groupID       string
	stream        string
	prompt        string
	policyVersion string
	policyStep    *int64
	index         int // -1 for the short form: position in the group
	spec          RolloutSpec
}

// Next implements Backend. A step whose every group was dropped (OnBadLine) is skipped.
func (j *JSONL) Next(ctx context.Context) (StepBatch, error) {
	for {
		b, err := j.next(ctx)
		if err != nil {
			return b, err
		}
		j.emitted = b.Step
		if drop := j.dropped[b.Step]; len(drop) > 0 {
			delete(j.dropped, b.Step)
			b.Groups = slices.DeleteFunc(b.Groups, func(g GroupSpec) bool { return drop[g.GroupID] })
		}
		if len(b.Groups) > 0 {
			return b, nil
		}
	}
}

func (j *JSONL) next(ctx context.Context) (StepBatch, error) {
	if j.done {
		return StepBatch{}, io.EOF
	}
	var (
		batch   *StepBatch
		pvLine  int
		groups  = map[string]int{} // group id → index in batch.Groups
		indexed = map[string][]*parsedLine{}
		firstOf = map[string]*parsedLine{}
	)
	for {
		if err := ctx.Err(); err != nil {
			return StepBatch{}, err
		}
		pl := j.pending
		j.pending = nil
		if pl == nil {
			var err error
			pl, err = j.read()
			if errors.Is(err, io.EOF) {
				j.done = true
				if batch == nil {
					return StepBatch{}, io.EOF
				}
				return j.finish(batch, indexed)
			}
			if err != nil {
				return StepBatch{}, err
			}
		}
		if batch == nil {
			batch = &StepBatch{Step: pl.step, PolicyVersion: pl.policyVersion, PolicyStep: pl.policyStep}
			pvLine = pl.line
		}
		if pl.step > batch.Step {
			j.pending = pl
			return j.finish(batch, indexed)
		}
		if pl.step < batch.Step {
			return StepBatch{}, lineErr(pl.line, "step %d after step %d: lines must be in non-decreasing step order", pl.step, batch.Step)
		}
		if pl.policyVersion != batch.PolicyVersion {
			return StepBatch{}, lineErr(pl.line, "policy_version %q differs from %q on line %d of the same step", pl.policyVersion, batch.PolicyVersion, pvLine)
		}
		if !samePolicyStep(pl.policyStep, batch.PolicyStep) {
			return StepBatch{}, lineErr(pl.line, "policy_step differs from line %d of the same step", pvLine)
		}
		gi, ok := groups[pl.groupID]
		if !ok {
			gi = len(batch.Groups)
			groups[pl.groupID] = gi
			batch.Groups = append(batch.Groups, GroupSpec{GroupID: pl.groupID, Stream: pl.stream, Prompt: pl.prompt})
			firstOf[pl.groupID] = pl
		}
		g := &batch.Groups[gi]
		if first := firstOf[pl.groupID]; pl.prompt != g.Prompt || pl.stream != g.Stream {
			return StepBatch{}, lineErr(pl.line, "group %s: prompt or stream differs from line %d of the same group", pl.groupID, first.line)
		}
		if (pl.index >= 0) != (firstOf[pl.groupID].index >= 0) {
			return StepBatch{}, lineErr(pl.line, "group %s mixes full rollout records and short lines", pl.groupID)
		}
		if len(g.Rollouts) >= topics.MaxGroupSize {
			return StepBatch{}, lineErr(pl.line, "group %s has more than %d rollouts", pl.groupID, topics.MaxGroupSize)
		}
		if pl.index >= 0 {
			indexed[pl.groupID] = append(indexed[pl.groupID], pl)
		}
		g.Rollouts = append(g.Rollouts, pl.spec)
	}
}

// finish orders full records by their index and checks the indices are exactly 0..G-1.
func (j *JSONL) finish(b *StepBatch, indexed map[string][]*parsedLine) (StepBatch, error) {
	for gi := range b.Groups {
		g := &b.Groups[gi]
		pls := indexed[g.GroupID]
		if len(pls) == 0 {
			continue
		}
		ordered := make([]RolloutSpec, len(pls))
		filled := make([]bool, len(pls))
		for _, pl := range pls {
			if pl.index >= len(pls) || filled[pl.index] {
				return StepBatch{}, lineErr(pl.line, "group %s: index %d duplicated or outside 0..%d (the group has %d rollouts)", g.GroupID, pl.index, len(pls)-1, len(pls))
			}
			filled[pl.index] = true
			ordered[pl.index] = pl.spec
		}
		g.Rollouts = ordered
	}
	return *b, nil
}

func lineErr(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrLine, line, fmt.Sprintf(format, args...))
}

// drop hands bad line b to OnBadLine and leaves out the group it names; a line whose step and
// group_id cannot be read, or whose step was already published, is an error (its group could
// not be left out whole).
func (j *JSONL) drop(b []byte, lerr error) error {
	var named struct {
		Schema  string `json:"schema"`
		Step    *int64 `json:"step"`
		GroupID string `json:"group_id"`
	}
	if json.Unmarshal(b, &named) != nil || named.Step == nil || *named.Step < 0 || named.GroupID == "" {
		return fmt.Errorf("%w (its step and group_id cannot be read, so its group cannot be left out whole)", lerr)
	}
	if *named.Step <= j.emitted {
		return fmt.Errorf("%w (step %d was already published)", lerr, *named.Step)
	}
	gid := named.GroupID
	if named.Schema == "" { // the short form's published group id (parse)
		gid = strconv.FormatInt(*named.Step, 10) + "-" + named.GroupID
	}
	if err := j.cfg.OnBadLine(j.line, b, lerr); err != nil {
		return err
	}
	if j.dropped[*named.Step] == nil {
		j.dropped[*named.Step] = map[string]bool{}
	}
	if !j.dropped[*named.Step][gid] {
		j.dropped[*named.Step][gid] = true
		j.drops = append(j.drops, fmt.Sprintf("step %d group %s", *named.Step, gid))
	}
	return nil
}

// read returns the next non-blank line, parsed.
func (j *JSONL) read() (*parsedLine, error) {
	for j.sc.Scan() {
		j.line++
		b := bytes.TrimSpace(j.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		pl, err := j.parse(b)
		if err != nil && j.cfg.OnBadLine != nil {
			if derr := j.drop(b, err); derr != nil {
				return nil, derr
			}
			continue
		}
		return pl, err
	}
	if err := j.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, lineErr(j.line+1, "longer than %d bytes", j.cfg.MaxLineBytes)
		}
		return nil, fmt.Errorf("read JSONL after line %d: %w", j.line, err)
	}
	return nil, io.EOF
}

func (j *JSONL) parse(b []byte) (*parsedLine, error) {
	keys, err := topLevelKeys(b)
	if err != nil {
		return nil, lineErr(j.line, "%v", err)
	}
	if _, full := keys["schema"]; full {
		return j.parseFull(b)
	}
	for k := range keys {
		if !jsonLineKeys[k] {
			return nil, lineErr(j.line, "unknown field %q (a full rollout record needs \"schema\": %q)", k, topics.SchemaRollout)
		}
	}
	var l JSONLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, lineErr(j.line, "%v", err)
	}
	if l.Step == nil {
		return nil, lineErr(j.line, "step is required")
	}
	if *l.Step < 0 {
		return nil, lineErr(j.line, "step %d is negative", *l.Step)
	}
	if l.PolicyStep != nil && (*l.PolicyStep < 0 || *l.PolicyStep > *l.Step) {
		return nil, lineErr(j.line, "policy_step %d must be in [0,step %d]", *l.PolicyStep, *l.Step)
	}
	if !topics.ValidID(l.GroupID) {
		return nil, lineErr(j.line, "group_id %q is not a valid id (1..%d of A-Z a-z 0-9 . _ - : @ +)", l.GroupID, topics.MaxIDLen)
	}
	gid := strconv.FormatInt(*l.Step, 10) + "-" + l.GroupID
	if !topics.ValidID(gid) {
		return nil, lineErr(j.line, "group id %q is too long", gid)
	}
	for field, v := range map[string]string{"rollout_id": l.RolloutID, "stream": l.Stream} {
		if v != "" && !topics.ValidID(v) {
			return nil, lineErr(j.line, "%s %q is not a valid id", field, v)
		}
	}
	if l.Artifact != "" && l.ArtifactURI != "" {
		return nil, lineErr(j.line, "artifact and artifact_uri are exclusive")
	}
	if l.ArtifactURI != "" && l.ArtifactSHA256 == "" {
		return nil, lineErr(j.line, "artifact_uri needs artifact_sha256")
	}
	if l.ArtifactURI == "" && (l.ArtifactSHA256 != "" || l.ArtifactSize != 0) {
		return nil, lineErr(j.line, "artifact_sha256 and artifact_size are only for artifact_uri (inline artifacts are hashed by the generator)")
	}
	return &parsedLine{
		line: j.line, step: *l.Step, groupID: gid, stream: l.Stream, prompt: l.Prompt,
		policyVersion: l.PolicyVersion, policyStep: l.PolicyStep, index: -1,
		spec: RolloutSpec{
			RolloutID: l.RolloutID, Artifact: []byte(l.Artifact), ArtifactURI: l.ArtifactURI,
			ArtifactSHA256: l.ArtifactSHA256, ArtifactSize: l.ArtifactSize, Meta: l.Meta,
		},
	}, nil
}

func (j *JSONL) parseFull(b []byte) (*parsedLine, error) {
	r, err := topics.DecodeRollout(b)
	if err != nil {
		return nil, lineErr(j.line, "%v", err)
	}
	if r.RunID != j.cfg.RunID {
		return nil, lineErr(j.line, "run_id %q, but the generator publishes run %q", r.RunID, j.cfg.RunID)
	}
	if want := topics.IsAnchor(r.RunID, r.GroupID, j.cfg.AnchorFraction); r.Anchor != want {
		return nil, lineErr(j.line, "anchor=%v, but hash(run_id, group_id)=%.6f against --anchor-fraction %v gives %v",
			r.Anchor, topics.AnchorHash(r.RunID, r.GroupID), j.cfg.AnchorFraction, want)
	}
	spec := RolloutSpec{RolloutID: r.RolloutID, Meta: r.Meta}
	if r.ArtifactURI != "" {
		spec.ArtifactURI, spec.ArtifactSHA256, spec.ArtifactSize = r.ArtifactURI, r.ArtifactSHA256, r.ArtifactSize
	} else {
		spec.Artifact = []byte(r.Artifact)
	}
	return &parsedLine{
		line: j.line, step: r.Step, groupID: r.GroupID, stream: r.Stream, prompt: r.Prompt,
		policyVersion: r.PolicyVersion, index: r.Index, spec: spec,
	}, nil
}

// topLevelKeys returns the keys of the JSON object b, rejecting anything but exactly one object
// and duplicate keys (which parsers resolve differently). encoding/json alone would also match
// keys case-insensitively, so callers compare the returned names exactly.
func topLevelKeys(b []byte) (map[string]bool, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("want a JSON object")
	}
	keys := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		k, _ := tok.(string)
		if keys[k] {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		keys[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, fmt.Errorf("not JSON: value of %q: %w", k, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	return keys, nil
}

// samePolicyStep compares two optional policy steps.
func samePolicyStep(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
