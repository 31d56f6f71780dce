package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// jailSyscalls are what the sandbox pod's seccomp profile allows on top of the container
// runtime's default profile, for bubblewrap to build the jail (strace of `wmrl sandbox`'s
// bwrap command line): clone with namespace flags and unshare (the user, mount, PID, IPC, UTS,
// network and cgroup namespaces; --disable-userns' nested user namespace), mount, umount2 and
// pivot_root (the jail's root, tmpfs and read-only binds), and clone3, which the default
// answers with ENOSYS and which per-job cgroups (CLONE_INTO_CGROUP) need. The runtime default
// gives the first five only to containers with CAP_SYS_ADMIN and pivot_root to none; everything
// else of the jail and of the jobs is in the default already.
var jailSyscalls = []string{"clone", "clone3", "mount", "pivot_root", "umount2", "unshare"}

// profileArches are the node architectures of the profile: native ABIs only, so a 32-bit or
// x32 system call is refused as an unknown architecture instead of reaching the kernel's compat
// entry points.
var profileArches = map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}

// SandboxSeccompProfile is the Localhost seccomp profile of the sandbox pod: the runtime
// default (moby's, which containerd and CRI-O apply as RuntimeDefault) as it applies to a
// container without capabilities on amd64 and arm64 with a kernel of at least 4.8, flattened to
// plain rules (a kubelet profile file and the Security Profiles Operator's SeccompProfile have no
// conditional rules, and no defaultErrnoRet in the CRD), plus jailSyscalls. It is the JSON of files/wmrl-sandbox-seccomp.json;
// TestSeccompProfileCurrent keeps the file equal to it.
func SandboxSeccompProfile() ([]byte, error) { return flattenedDefault(jailSyscalls) }

// flattenedDefault is the runtime default as SandboxSeccompProfile describes it, with extra
// allowed unconditionally (replacing the default's rules for those calls).
func flattenedDefault(extra []string) ([]byte, error) {
	def := seccomp.DefaultProfile()
	// The SeccompProfile CRD has no defaultErrnoRet; EPERM is what runtimes return without one.
	if def.DefaultErrnoRet != nil && *def.DefaultErrnoRet != uint(unix.EPERM) {
		return nil, fmt.Errorf("default profile's defaultErrnoRet is %d, not EPERM", *def.DefaultErrnoRet)
	}
	out := struct {
		DefaultAction specs.LinuxSeccompAction `json:"defaultAction"`
		Architectures []specs.Arch             `json:"architectures"`
		Syscalls      []specs.LinuxSyscall     `json:"syscalls"`
	}{DefaultAction: def.DefaultAction}
	for _, goarch := range []string{"amd64", "arm64"} {
		out.Architectures = append(out.Architectures, profileArches[goarch])
	}
	ours := func(arches []string) bool {
		return slices.ContainsFunc(arches, func(a string) bool { _, ok := profileArches[a]; return ok })
	}
	// As moby's setupSeccomp decides, for a container without capabilities on one of
	// profileArches and a kernel newer than every MinKernel of the default.
	included := func(f *seccomp.Filter) bool {
		return f == nil || (len(f.Caps) == 0 && (len(f.Arches) == 0 || ours(f.Arches)))
	}
	excluded := func(f *seccomp.Filter) bool {
		return f != nil && (ours(f.Arches) || f.MinKernel != nil)
	}
	for _, s := range def.Syscalls {
		//lint:ignore SA1019 the deprecated field is read only to refuse a profile that uses it
		if old := s.Name; old != "" {
			return nil, fmt.Errorf("default profile rule %q uses the old name field", old)
		}
		if !included(s.Includes) || excluded(s.Excludes) {
			continue
		}
		names := slices.DeleteFunc(slices.Clone(s.Names), func(n string) bool { return slices.Contains(extra, n) })
		if len(names) == 0 {
			continue // e.g. clone without namespace flags, clone3 with ENOSYS: replaced below
		}
		r := s.LinuxSyscall
		r.Names = names
		out.Syscalls = append(out.Syscalls, r)
	}
	out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: extra, Action: specs.ActAllow})
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
