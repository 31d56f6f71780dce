// Package sandbox executes anchor rollouts for real: a pool of exclusive
// slots in front of an Executor, which is either a CommandExecutor (untrusted
// code in a jail — bubblewrap with a user namespace and no capabilities — as
// an unprivileged uid, in a per-job cgroup or PID namespace with limits and a
// wall-clock timeout) or a BuiltinExecutor (an in-process task such as the
// demo's). The Kafka stage loop is built on top of this package.
//
// The jail — containment, limits, bubblewrap, the job's uid — is package
// jail; this package decides what runs and what its outcome means. For
// one: exhausting RLIMIT_CPU is reported as StatusTimeout (not error), as
// it is the same failure as the wall clock — the rollout used up its time
// budget — and PolicyZero should impute 0 for both, as the reference does
// for its 600 s cap.
package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Executor runs one rollout and reports its outcome. Implementations must
// return exactly one Result per call (failures are Results, never panics or
// missing values), because the stage publishes one record per rollout and
// absence must never encode failure (the correction consumer waits for every rollout's reward record).
type Executor interface {
	Execute(ctx context.Context, job Job) Result
}

// Job is one rollout to execute.
type Job struct {
	RunID     string
	GroupID   string
	RolloutID string
	Step      int64
	// Artifact is the rollout's code or solution, written to a file in the
	// job's private directory by CommandExecutor.
	Artifact []byte
	// ArtifactName is the file name for Artifact (a plain base name);
	// empty means "artifact".
	ArtifactName string
	// Rollout, if set, is written to RolloutFile ({dir}/rollout.json) in
	// the grade step's directory: the rollout record as JSON, meta
	// included, so the grader can grade against the task (a label, the
	// tests to run). It is private: the run step never gets it.
	Rollout []byte
	// Meta is the rollout's meta, for {meta.KEY} placeholders: every key
	// in the grade step, the CommandConfig.InputMeta keys in the run step.
	Meta map[string]string
	// Slot is the pool slot running the job, set by Pool.Submit: the
	// executor may give each slot its own budget (a uid per slot).
	Slot int
}

// Result is the outcome of one execution. Score is meaningful only when
// Status is StatusOK; use Policy.Apply to turn a Result into a reward.
type Result struct {
	Score  float64
	Status Status
	// Reason says why a non-OK result is not OK (empty for StatusOK).
	Reason string
	// StderrTail holds the last bytes of the child's stderr (CommandExecutor).
	StderrTail string
	// Duration is the wall time of the execution itself.
	Duration time.Duration
	// ExitCode is the child's exit code (in two steps the grade step's; the
	// run step's is the grader's to see), or -1 if it did not exit normally
	// (signal, timeout, not started) or there is no child process.
	ExitCode int

	canceled bool
	oom      bool
}

// Canceled reports whether the result is an artefact of the caller's context
// being canceled (shutdown) rather than a property of the rollout. The stage
// loop should not publish such results: the rollout will be redelivered.
func (r Result) Canceled() bool { return r.canceled }

// OOMKilled reports whether the kernel killed a process of the job for
// exceeding its memory cgroup limit (Status is then StatusError).
func (r Result) OOMKilled() bool { return r.oom }

// Status classifies a Result.
type Status int

// The four outcomes of an execution. The zero value is deliberately not a
// valid status so that an unset Result is never mistaken for a success.
const (
	StatusOK Status = iota + 1
	StatusTimeout
	StatusError
	StatusInvalid
)

var statusNames = map[Status]string{
	StatusOK:      "ok",
	StatusTimeout: "timeout",
	StatusError:   "error",
	StatusInvalid: "invalid",
}

// ErrUnknownStatus is returned by ParseStatus for names it does not know.
var ErrUnknownStatus = errors.New("sandbox: unknown status")

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// ParseStatus is the inverse of Status.String.
func ParseStatus(name string) (Status, error) {
	for s, n := range statusNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownStatus, name)
}

// MarshalText encodes the status by name, so records carry "timeout" rather
// than a number whose meaning depends on this package's constants.
func (s Status) MarshalText() ([]byte, error) {
	if _, ok := statusNames[s]; !ok {
		return nil, fmt.Errorf("%w %d", ErrUnknownStatus, int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a status name.
func (s *Status) UnmarshalText(b []byte) error {
	v, err := ParseStatus(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Policy decides how a timed-out rollout is scored. The executor always
// reports the true status; the policy only decides the reward derived from it.
type Policy int

const (
	// PolicyMissing (default) excludes timed-out rollouts from the group's
	// advantage, because a timeout says nothing about the solution's quality.
	PolicyMissing Policy = iota
	// PolicyZero scores a timeout as 0, as the authors' reference code does.
	PolicyZero
)

// ErrUnknownPolicy is returned by ParsePolicy for names it does not know.
var ErrUnknownPolicy = errors.New("sandbox: unknown timeout policy")

func (p Policy) String() string {
	switch p {
	case PolicyMissing:
		return "missing"
	case PolicyZero:
		return "zero"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses "missing" or "zero"; the empty string means the default
// (missing).
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "missing":
		return PolicyMissing, nil
	case "zero":
		return PolicyZero, nil
	}
	return 0, fmt.Errorf("%w %q (want missing or zero)", ErrUnknownPolicy, s)
}

// MarshalText encodes the policy by name.
func (p Policy) MarshalText() ([]byte, error) {
	if p != PolicyMissing && p != PolicyZero {
		return nil, fmt.Errorf("%w %d", ErrUnknownPolicy, int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText decodes a policy name.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Apply turns a Result into a reward: usable is false when the rollout has no
// reward and must be excluded from its group. Only StatusOK carries a score;
// under PolicyZero a timeout is imputed as 0. Errors and invalid outputs are
// never imputed — they are failures of the rollout's code, not of its budget,
// and the reference only zero-scores timeouts.
func (p Policy) Apply(r Result) (score float64, usable bool) {
	switch r.Status {
	case StatusOK:
		return r.Score, true
	case StatusTimeout:
		if p == PolicyZero && !r.canceled {
			return 0, true
		}
	}
	return 0, false
}

// ErrInvalidScore is wrapped by score parsing failures.
var ErrInvalidScore = errors.New("sandbox: invalid score")

// scoreRange is the closed interval a score must lie in.
type scoreRange struct{ min, max float64 }

// newScoreRange applies the [0,1] default when both bounds are zero.
func newScoreRange(min, max float64) (scoreRange, error) {
	if min == 0 && max == 0 {
		return scoreRange{0, 1}, nil
	}
	if math.IsNaN(min) || math.IsNaN(max) || !(min < max) {
		return scoreRange{}, fmt.Errorf("sandbox: score range [%v, %v] is empty", min, max)
	}
	return scoreRange{min, max}, nil
}

func (r scoreRange) check(x float64) error {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return fmt.Errorf("%w: %v is not finite", ErrInvalidScore, x)
	}
	if x < r.min || x > r.max {
		return fmt.Errorf("%w: %v outside [%v, %v]", ErrInvalidScore, x, r.min, r.max)
	}
	return nil
}

// maxReasonQuote bounds how much of a bad line is quoted in a Reason.
const maxReasonQuote = 120

// parse extracts the score from a program's stdout: the last non-empty line
// must be a JSON object with a numeric "score" (other fields are ignored)
// inside r. Only the last line counts so that programs may log freely before
// reporting.
func (r scoreRange) parse(stdout []byte) (float64, error) {
	line := lastNonEmptyLine(stdout)
	if line == nil {
		return 0, fmt.Errorf("%w: no output on stdout", ErrInvalidScore)
	}
	// A map rather than a struct: encoding/json matches struct fields
	// case-insensitively, and the contract is the exact key "score".
	var v map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&v); err != nil || v == nil {
		if err == nil {
			err = errors.New("null")
		}
		return 0, fmt.Errorf("%w: last stdout line %s is not a JSON object: %v", ErrInvalidScore, quote(line), err)
	}
	if dec.More() {
		return 0, fmt.Errorf("%w: trailing data after JSON object in %s", ErrInvalidScore, quote(line))
	}
	raw, ok := v["score"]
	if !ok {
		return 0, fmt.Errorf("%w: last stdout line %s has no \"score\" field", ErrInvalidScore, quote(line))
	}
	var x float64
	// Unmarshalling into float64 rejects strings, and null would leave
	// x at 0, so check for it explicitly.
	if err := json.Unmarshal(raw, &x); err != nil || string(raw) == "null" {
		return 0, fmt.Errorf("%w: \"score\" is %s, not a number", ErrInvalidScore, quote(raw))
	}
	if x == 0 {
		x = 0 // normalise -0
	}
	if err := r.check(x); err != nil {
		return 0, err
	}
	return x, nil
}

func lastNonEmptyLine(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), len(b)+1)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			last = append(last[:0], l...)
		}
	}
	return last
}

func quote(b []byte) string {
	if len(b) > maxReasonQuote {
		return fmt.Sprintf("%q…", validUTF8(b[:maxReasonQuote]))
	}
	return fmt.Sprintf("%q", validUTF8(b))
}

// validUTF8 drops a rune split by truncation and replaces invalid bytes, so
// tails can go into JSON records and logs.
func validUTF8(b []byte) string {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			b = b[i:]
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
