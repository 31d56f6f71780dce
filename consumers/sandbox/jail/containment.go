package jail

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Containment is how a job's processes are held together so that all of them
// can be killed, and how its memory is bounded. New detects
// what the host offers and takes the first available in this order:
//
//  1. ContainmentCgroup: one cgroup per job. The child is started inside it
//     (clone3 CLONE_INTO_CGROUP on cgroup v2; on cgroup v1 the forking thread
//     joins the job's cgroups first), so no descendant can leave it: setsid,
//     double forks and re-parenting do not matter. At the timeout and after
//     the main process exits every process in it is killed (cgroup.kill on
//     v2, otherwise SIGKILL to each listed process until the cgroup is
//     empty). Limits.MemoryBytes is the cgroup's memory limit (swap
//     included) for the job as a whole; exceeding it is an OOM kill, reported
//     as such. Limits.Processes also becomes the job's pids limit.
//  2. ContainmentPIDNamespace: the child is the init of a new PID namespace
//     (needs CAP_SYS_ADMIN); when it exits or is killed the kernel kills
//     every process in the namespace. The program runs as PID 1, so signals
//     it sends itself without a handler are ignored. Memory falls back to
//     RLIMIT_AS per process.
//  3. ContainmentProcessGroup: the last resort. A process that calls setsid
//     leaves the group and outlives the job; memory falls back to RLIMIT_AS.
//
// Bubblewrap (UseBwrap) adds its own PID namespace on top of any of them.
type Containment string

// The containments, strongest first. ContainmentAuto picks the strongest
// available; naming one makes its absence a start-up error.
const (
	ContainmentAuto         Containment = ""
	ContainmentCgroup       Containment = "cgroup"
	ContainmentPIDNamespace Containment = "pidns"
	ContainmentProcessGroup Containment = "pgroup"
)

// containmentOrder is the preference order of ContainmentAuto.
var containmentOrder = []Containment{ContainmentCgroup, ContainmentPIDNamespace, ContainmentProcessGroup}

// Containments are the containments ContainmentAuto chooses from, strongest
// first.
func Containments() []Containment { return slices.Clone(containmentOrder) }

// ErrContainmentUnavailable is returned by New when the
// requested containment cannot be set up here; the message says why.
var ErrContainmentUnavailable = errors.New("sandbox: requested containment is not available")

// ErrUnknownContainment is returned by ParseContainment.
var ErrUnknownContainment = errors.New("sandbox: unknown containment")

// ParseContainment parses "auto" (or ""), "cgroup", "pidns" or "pgroup".
func ParseContainment(s string) (Containment, error) {
	switch c := Containment(strings.ToLower(strings.TrimSpace(s))); c {
	case "auto", ContainmentAuto:
		return ContainmentAuto, nil
	case ContainmentCgroup, ContainmentPIDNamespace, ContainmentProcessGroup:
		return c, nil
	}
	return "", fmt.Errorf("%w %q (want auto, cgroup, pidns or pgroup)", ErrUnknownContainment, s)
}

func (c Containment) String() string {
	if c == ContainmentAuto {
		return "auto"
	}
	return string(c)
}

// weakness is what containment c leaves open, "" when it is not a weak fallback; the start-up
// log's weak field and its guarantees line say it alike.
func (c Containment) weakness() string {
	if c == ContainmentProcessGroup {
		return "only the process group is killed, a setsid escapee outlives its job"
	}
	return ""
}

// guarantees is the one-line summary logged at start-up.
func (c Containment) guarantees() string {
	switch c {
	case ContainmentCgroup:
		return "every descendant is killed at the timeout and at exit (setsid cannot escape); memory and process count are cgroup limits for the whole job; OOM kills are reported"
	case ContainmentPIDNamespace:
		return "every descendant is killed when the job's init (the program, PID 1) exits or times out; memory is only RLIMIT_AS per process"
	case ContainmentProcessGroup:
		return "WEAK: " + c.weakness() + "; memory is only RLIMIT_AS per process"
	}
	return "unknown"
}
