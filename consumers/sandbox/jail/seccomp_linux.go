package jail

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	mobyseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The jail's system-call filter: Docker's default profile (moby/profiles,
// evaluated for a process without capabilities on this kernel and
// architecture) with the calls below denied on top, assembled by
// go-seccomp-bpf into a classic BPF program that bwrap installs with
// --seccomp as the last step before it execs the job (after its own
// namespace set-up, which needs some of these calls). A denied call fails
// with EPERM (clone3 with ENOSYS, so libc falls back to clone, whose flags
// the filter can read), so programs see an error rather than a kill. Every
// ABI but the native one is denied: the assembler's architecture check
// sends a foreign audit arch (the 32-bit int 0x80 entry on x86-64) to the
// default action, and on x86-64 it answers every x32 call (the
// __X32_SYSCALL_BIT) with ENOSYS.

// seccompDenied are denied on top of Docker's profile, which lets a process
// without capabilities make some of them (or may in a later version): the
// kernel surface the jail has no use for and that has carried privilege
// escalations (io_uring, bpf, perf_event_open, userfaultfd), the keyrings
// (the stage's session keyring is inherited, and a key one job leaves would
// be seen by the next), and new namespaces (a nested user namespace gives
// the job capabilities over a fresh mount namespace, which is how it would
// mount a tmpfs past its quota).
var seccompDenied = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"unshare", "setns",
	"bpf", "perf_event_open", "userfaultfd",
}

// seccompNoSys answer ENOSYS: clone3 passes its flags in memory the filter
// cannot read, and libc falls back to clone on ENOSYS.
var seccompNoSys = []string{"clone3"}

// seccompNamespaceFlags are clone's namespace flags. The policy has no rule
// of its own for them: Docker's profile allows clone only without them for
// a process lacking CAP_SYS_ADMIN, and TestSeccompProgram checks that every
// one of them is still denied.
const seccompNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// mobyProfilesModule is the module Docker's profile comes from.
const mobyProfilesModule = "github.com/moby/profiles/seccomp"

// ErrSeccomp is returned when the filter cannot be built here (an
// architecture the assembler does not know, a rule it cannot express).
var ErrSeccomp = errors.New("sandbox: cannot build the seccomp filter")

// seccompFilter is the compiled filter and what the start-up log says of it.
type seccompFilter struct {
	// prog is the program as bwrap --seccomp reads it: struct sock_filter
	// entries in native byte order.
	prog []byte
	// arch is the one ABI the filter lets through.
	arch string
	// allowed and denied count syscall names (denied: those denied by name,
	// on top of everything the default action denies); unknown are names of
	// Docker's profile the assembler's table lacks for this architecture
	// (the other ABIs' calls, like chown32), which the default denies.
	allowed, denied, unknown int
	// source names the profile and its module version.
	source string
}

// digest is a short hash of the program, so two stages' logs show whether
// they run the same filter.
func (f *seccompFilter) digest() string {
	sum := sha256.Sum256(f.prog)
	return hex.EncodeToString(sum[:6])
}

// String is the policy as the containment log line prints it.
func (f *seccompFilter) String() string {
	return fmt.Sprintf("%s + wmrl denials, sha256:%s, %d syscalls allowed, %d denied by name (EPERM; clone3 ENOSYS; clone with CLONE_NEW* EPERM), everything else EPERM, ABI %s only (%d BPF instructions)",
		f.source, f.digest(), f.allowed, f.denied, f.arch, len(f.prog)/8)
}

// buildSeccomp assembles the filter for this process's architecture.
func buildSeccomp() (*seccompFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	// No capabilities: the job has none (bwrap --cap-drop ALL), so the
	// rules Docker gives CAP_SYS_ADMIN & co. are left out.
	profile, err := mobyseccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		return nil, fmt.Errorf("%w: Docker's default profile: %w", ErrSeccomp, err)
	}
	policy, f, err := seccompPolicy(profile, info)
	if err != nil {
		return nil, err
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	f.prog = make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		f.prog = binary.NativeEndian.AppendUint16(f.prog, r.Op)
		f.prog = append(f.prog, r.Jt, r.Jf)
		f.prog = binary.NativeEndian.AppendUint32(f.prog, r.K)
	}
	return f, nil
}

// seccompPolicy translates Docker's profile (already evaluated for this
// kernel, architecture and an empty capability set) into the assembler's
// policy, with seccompDenied and seccompNoSys in front of it: the assembler
// takes the first group that matches.
func seccompPolicy(profile *specs.LinuxSeccomp, info *arch.Info) (*seccompbpf.Policy, *seccompFilter, error) {
	f := &seccompFilter{arch: info.Name, source: "Docker default profile (" + mobyProfilesModule + " " + moduleVersion(mobyProfilesModule) + ")"}
	if profile.DefaultAction != specs.ActErrno || (profile.DefaultErrnoRet != nil && *profile.DefaultErrnoRet != uint(unix.EPERM)) {
		return nil, nil, fmt.Errorf("%w: Docker's default action is %s, not errno EPERM", ErrSeccomp, profile.DefaultAction)
	}
	overridden := append(slices.Clone(seccompDenied), seccompNoSys...)
	policy := &seccompbpf.Policy{DefaultAction: seccompbpf.ActionErrno, Syscalls: []seccompbpf.SyscallGroup{
		{Names: seccompDenied, Action: seccompbpf.ActionErrno | seccompbpf.Action(unix.EPERM)},
		{Names: seccompNoSys, Action: seccompbpf.ActionErrno | seccompbpf.Action(unix.ENOSYS)},
	}}
	f.denied = len(seccompDenied) + len(seccompNoSys)
	// One group of unconditional names and one of conditional ones per
	// action (the assembler refuses a name that is both in one group).
	type groups struct {
		plain []string
		cond  []seccompbpf.NameWithConditions
	}
	byAction := map[seccompbpf.Action]*groups{}
	var order []seccompbpf.Action
	counted := map[string]bool{}
	for _, sc := range profile.Syscalls {
		action, err := seccompAction(sc)
		if err != nil {
			return nil, nil, err
		}
		conds, err := seccompConditions(sc.Args)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v: %w", ErrSeccomp, sc.Names, err)
		}
		g := byAction[action]
		if g == nil {
			g = &groups{}
			byAction[action] = g
			order = append(order, action)
		}
		for _, name := range sc.Names {
			if slices.Contains(overridden, name) {
				continue
			}
			if _, ok := info.SyscallNames[name]; !ok {
				if !counted[name] {
					counted[name] = true
					f.unknown++
				}
				continue
			}
			if !counted[name] && action == seccompbpf.ActionAllow {
				f.allowed++
			}
			counted[name] = true
			if len(conds) == 0 {
				if !slices.Contains(g.plain, name) {
					g.plain = append(g.plain, name)
				}
				continue
			}
			g.cond = append(g.cond, seccompbpf.NameWithConditions{Name: name, Conditions: conds})
		}
	}
	for _, a := range order {
		g := byAction[a]
		// A name allowed outright needs no conditional rule besides.
		g.cond = slices.DeleteFunc(g.cond, func(nc seccompbpf.NameWithConditions) bool { return slices.Contains(g.plain, nc.Name) })
		policy.Syscalls = append(policy.Syscalls,
			seccompbpf.SyscallGroup{Names: g.plain, Action: a},
			seccompbpf.SyscallGroup{NamesWithCondtions: g.cond, Action: a})
	}
	return policy, f, nil
}

// seccompAction maps a profile rule's action.
func seccompAction(sc specs.LinuxSyscall) (seccompbpf.Action, error) {
	switch sc.Action {
	case specs.ActAllow:
		return seccompbpf.ActionAllow, nil
	case specs.ActErrno:
		errno := uint(unix.EPERM)
		if sc.ErrnoRet != nil {
			errno = *sc.ErrnoRet
		}
		return seccompbpf.ActionErrno | seccompbpf.Action(errno), nil
	}
	return 0, fmt.Errorf("%w: %v: action %s is not supported", ErrSeccomp, sc.Names, sc.Action)
}

// seccompConditions maps a rule's argument conditions (all of which must
// hold). MASKED_EQ is only supported with 0 as the expected value (the
// flags of the mask all clear), the one form Docker's profile uses.
func seccompConditions(args []specs.LinuxSeccompArg) (seccompbpf.ArgumentConditions, error) {
	var out seccompbpf.ArgumentConditions
	seen := map[uint]bool{}
	for _, a := range args {
		if seen[a.Index] {
			// libseccomp and runc read two comparisons of one argument as
			// alternatives; this translation would AND them.
			return nil, fmt.Errorf("two conditions on argument %d", a.Index)
		}
		seen[a.Index] = true
		c := seccompbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = seccompbpf.Equal
		case specs.OpNotEqual:
			c.Operation = seccompbpf.NotEqual
		case specs.OpLessThan:
			c.Operation = seccompbpf.LessThan
		case specs.OpLessEqual:
			c.Operation = seccompbpf.LessOrEqual
		case specs.OpGreaterThan:
			c.Operation = seccompbpf.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = seccompbpf.GreaterOrEqual
		case specs.OpMaskedEqual:
			if a.ValueTwo != 0 {
				return nil, fmt.Errorf("argument %d: masked compare with expected value %#x", a.Index, a.ValueTwo)
			}
			c.Operation = seccompbpf.BitsNotSet
		default:
			return nil, fmt.Errorf("argument %d: operator %s", a.Index, a.Op)
		}
		out = append(out, c)
	}
	return out, nil
}

// moduleVersion is the version of module path built into this binary.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// file hands one job's bwrap the filter: bwrap reads --seccomp FD to its
// end, so each job gets a fresh memfd holding the program, at offset 0.
func (f *seccompFilter) file() (*os.File, error) {
	fd, err := unix.MemfdCreate("wmrl-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp memfd: %w", err)
	}
	m := os.NewFile(uintptr(fd), "wmrl-seccomp")
	if _, err := m.Write(f.prog); err != nil {
		m.Close()
		return nil, fmt.Errorf("sandbox: seccomp memfd: %w", err)
	}
	if _, err := m.Seek(0, 0); err != nil {
		m.Close()
		return nil, fmt.Errorf("sandbox: seccomp memfd: %w", err)
	}
	return m, nil
}
