//go:build !linux

package jail

import (
	"context"
	"os"
	"syscall"
)

// supported is false: process groups, waitid(WNOWAIT), prlimit and
// bubblewrap are Linux mechanisms, and a jail without them would be a lie.
const supported = false

const (
	sigKill syscall.Signal = 9
	sigXCPU syscall.Signal = 24
)

type jobCell interface{}

// containment is never detected here: New returns ErrUnsupported first.
type containment struct {
	kind   Containment
	detail string
}

func detectContainment(Containment, bool) (*containment, error) { return nil, ErrUnsupported }
func (*containment) memoryCgroup() bool                         { return false }
func (*containment) pidsCgroup() bool                           { return false }
func perUserNSNproc() bool                                      { return false }
func stageNproc() string                                        { return "?" }
func (*containment) killScope() string                          { return "" }
func (*containment) newCell(Limits) (jobCell, error)            { return nil, ErrUnsupported }

// Probe reports that no containment is available off Linux.
func Probe(Containment) error { return ErrUnsupported }

// CgroupHomes: there are no cgroups off Linux.
func CgroupHomes() (dirs, notes []string) { return nil, []string{ErrUnsupported.Error()} }

func runProcess(context.Context, runSpec) Outcome {
	return Outcome{StartErr: ErrUnsupported, ExitCode: -1}
}

// SignalName is the signal's name.
func SignalName(s syscall.Signal) string { return s.String() }

// SignalHint has nothing to add off Linux.
func SignalHint(syscall.Signal) string { return "" }

func bwrapSignal(int) (syscall.Signal, bool)         { return 0, false }
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
	seccompFD    int
}

type seccompFilter struct{}

func buildSeccomp() (*seccompFilter, error)    { return nil, ErrUnsupported }
func (*seccompFilter) file() (*os.File, error) { return nil, ErrUnsupported }
func (*seccompFilter) String() string          { return "" }
func (*seccompFilter) digest() string          { return "" }
func closeInheritedOnExec() error              { return nil }

const jailFD = 3
