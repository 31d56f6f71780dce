//go:build !linux

package sandbox

import (
	"context"
	"os"
	"syscall"
	"time"
)

// commandSupported is false: process groups, waitid(WNOWAIT), prlimit and
// bubblewrap are Linux mechanisms, and a sandbox without them would be a lie.
const commandSupported = false

type signal = syscall.Signal

const (
	sigKill signal = 9
	sigXCPU signal = 24
)

type runSpec struct {
	argv      []string
	dir       string
	env       []string
	runAs     *RunAs
	timeout   time.Duration
	stdoutMax int
	stderrMax int
	grace     time.Duration
	cell      jobCell
	files     []*os.File
}

type procOutcome struct {
	startErr    error
	timedOut    bool
	canceled    bool
	cancelCause error
	signaled    bool
	signal      signal
	exitCode    int
	cpu         time.Duration
	duration    time.Duration
	stdout      []byte
	stderr      []byte
	pipeHeld    bool
	oomKills    int
	cellErr     error
}

type jobCell interface{}

// containment is never detected here: NewCommandExecutor returns
// ErrUnsupported first.
type containment struct {
	kind   Containment
	detail string
}

func detectContainment(Containment) (*containment, error) { return nil, ErrUnsupported }
func (*containment) memoryCgroup() bool                   { return false }
func (*containment) killScope() string                    { return "" }
func (*containment) newCell(Limits) (jobCell, error)      { return nil, ErrUnsupported }

func runProcess(context.Context, runSpec) procOutcome {
	return procOutcome{startErr: ErrUnsupported, exitCode: -1}
}

func signalName(s signal) string                     { return s.String() }
func signalHint(signal) string                       { return "" }
func bwrapSignal(int) (signal, bool)                 { return 0, false }
func prlimitPrefix(string, Limits) ([]string, error) { return nil, ErrUnsupported }
func findBwrap(string) (string, error)               { return "", ErrUnsupported }
func jailArgs(jailSpec) []string                     { return nil }
func checkReachable([]string, *RunAs) error          { return ErrUnsupported }
func jailReadOnlyPaths(_, _ []string) []string       { return nil }

type jailSpec struct {
	bwrap        string
	dir          string
	files        []string
	modes        []os.FileMode
	tmpfsBytes   uint64
	allowNetwork bool
	readOnly     []string
}
