package jail

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// containment is the executor's chosen Containment with what it needs to make
// one cell per job.
type containment struct {
	kind   Containment
	cg     *cgroupHost // ContainmentCgroup only
	detail string
}

// memoryCgroup reports whether Limits.MemoryBytes is enforced as a cgroup
// limit (otherwise it falls back to RLIMIT_AS).
func (c *containment) memoryCgroup() bool { return c.kind == ContainmentCgroup }

// pidsCgroup reports whether Limits.Processes is each job's own pids cgroup
// limit, whose refusals pids.events counts (otherwise it is RLIMIT_NPROC).
func (c *containment) pidsCgroup() bool { return c.kind == ContainmentCgroup && c.cg.hasPids() }

// killScope names what a timeout kills, for Reason.
func (c *containment) killScope() string {
	switch c.kind {
	case ContainmentCgroup:
		return "job cgroup"
	case ContainmentPIDNamespace:
		return "PID namespace"
	}
	return "process group"
}

// detectContainment probes the host and returns the requested containment,
// or the strongest available for ContainmentAuto. A requested containment
// that is not available is an error carrying the probes' findings.
// v1Only ignores the cgroup2 mount (Config.CgroupV1Only).
func detectContainment(req Containment, v1Only bool) (*containment, error) {
	pf := selfProcFiles
	pf.v1Only = v1Only
	return detectContainmentIn(req, pf)
}

// Probe reports whether containment c can be set up here: nil, or an error
// wrapping ErrContainmentUnavailable that carries the probes' findings.
func Probe(c Containment) error {
	_, err := detectContainment(c, false)
	return err
}

// CgroupHomes are the cgroup directories this process makes its job cgroups
// in (one per hierarchy it uses), or none with notes saying why cgroup
// containment is unavailable. Job cgroups are named wmrl-<pid>-<n>.
func CgroupHomes() (dirs, notes []string) {
	h, notes := detectCgroups(selfProcFiles)
	if !h.usable() {
		return nil, notes
	}
	for _, d := range []string{h.v2, h.v1Memory, h.v1Pids} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

func detectContainmentIn(req Containment, pf procFiles) (*containment, error) {
	if req != ContainmentAuto && !containmentKnown(req) {
		return nil, fmt.Errorf("%w %q", ErrUnknownContainment, req)
	}
	var why []string
	for _, kind := range containmentOrder {
		if req != ContainmentAuto && kind != req {
			continue
		}
		c, err := probeContainment(kind, pf)
		if err == nil {
			return c, nil
		}
		why = append(why, fmt.Sprintf("%s: %v", kind, err))
	}
	return nil, fmt.Errorf("%w: %s", ErrContainmentUnavailable, strings.Join(why, "; "))
}

func containmentKnown(c Containment) bool {
	for _, k := range containmentOrder {
		if k == c {
			return true
		}
	}
	return false
}

func probeContainment(kind Containment, pf procFiles) (*containment, error) {
	switch kind {
	case ContainmentCgroup:
		h, notes := detectCgroups(pf)
		if !h.usable() {
			return nil, errors.New(strings.Join(notes, "; "))
		}
		return &containment{kind: kind, cg: h, detail: h.String()}, nil
	case ContainmentPIDNamespace:
		if err := probePIDNamespace(); err != nil {
			return nil, err
		}
		return &containment{kind: kind, detail: "CLONE_NEWPID"}, nil
	case ContainmentProcessGroup:
		return &containment{kind: kind, detail: "setpgid"}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownContainment, kind)
}

// probePIDNamespace starts true(1) in a new PID namespace, which needs
// CAP_SYS_ADMIN (root, or a user namespace this executor does not create).
func probePIDNamespace() error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no true(1) to probe with: %w", err)
	}
	cmd := exec.Command(truePath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cannot create a PID namespace (needs CAP_SYS_ADMIN): %w", err)
	}
	return nil
}

// newCell makes the containment of one job.
func (c *containment) newCell(l Limits) (jobCell, error) {
	switch c.kind {
	case ContainmentCgroup:
		j, err := c.cg.newJob(l)
		if err != nil {
			return nil, err
		}
		return cgroupCell{j}, nil
	case ContainmentPIDNamespace:
		return pidnsCell{}, nil
	}
	return pgroupCell{}, nil
}

// jobCell holds one job's processes together: enter arranges for the child
// to start inside it (called on the locked forking thread, leave right after
// the fork), kill kills every process it holds, oomKills counts kernel OOM
// kills and release removes it.
type jobCell interface {
	enter(attr *syscall.SysProcAttr) (leave func() error, err error)
	kill(pid int)
	oomKills() int
	pidsRefused() int
	release() error
}

type pgroupCell struct{}

func (pgroupCell) enter(*syscall.SysProcAttr) (func() error, error) { return nil, nil }
func (pgroupCell) kill(pid int)                                     { killGroup(pid) }
func (pgroupCell) oomKills() int                                    { return 0 }
func (pgroupCell) pidsRefused() int                                 { return 0 }
func (pgroupCell) release() error                                   { return nil }

// pidnsCell makes the child the init of a new PID namespace: killing it (or
// its exit) makes the kernel kill every other process in the namespace.
type pidnsCell struct{}

func (pidnsCell) enter(attr *syscall.SysProcAttr) (func() error, error) {
	attr.Cloneflags |= syscall.CLONE_NEWPID
	return nil, nil
}
func (pidnsCell) kill(pid int)     { killGroup(pid) }
func (pidnsCell) oomKills() int    { return 0 }
func (pidnsCell) pidsRefused() int { return 0 }
func (pidnsCell) release() error   { return nil }

type cgroupCell struct{ j *cgroupJob }

func (c cgroupCell) enter(attr *syscall.SysProcAttr) (func() error, error) { return c.j.enter(attr) }
func (c cgroupCell) kill(pid int) {
	killGroup(pid)
	c.j.kill()
}
func (c cgroupCell) oomKills() int    { return c.j.oomKills() }
func (c cgroupCell) pidsRefused() int { return c.j.pidsRefused() }
func (c cgroupCell) release() error   { return c.j.remove() }
