package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSeccompProfileCurrent keeps the chart's seccomp profile equal to what SandboxSeccompProfile
// derives from the runtime default (a moby/profiles upgrade or a change to jailSyscalls shows up
// here), and checks what it is: an allow-list (anything unnamed is refused with EPERM) on the
// native ABIs only, allowing the jail's calls without conditions and still refusing what the
// runtime default refuses a container without capabilities — the kernel keyring, io_uring, bpf,
// perf_event_open, userfaultfd, setns, the new mount API, module and kexec loading,
// open_by_handle_at, chroot, sethostname.
func TestSeccompProfileCurrent(t *testing.T) {
	want, err := SandboxSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(seccompFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the generated profile; run `go run . -seccomp-profile %s` in deploy/helm/check", seccompFile, seccompFile)
	}
	var p struct {
		DefaultAction string   `json:"defaultAction"`
		Architectures []string `json:"architectures"`
		Syscalls      []struct {
			Names  []string          `json:"names"`
			Action string            `json:"action"`
			Args   []json.RawMessage `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(got, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || !slices.Equal(p.Architectures, []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}) {
		t.Errorf("defaultAction %s, architectures %v: want an allow-list on x86_64 and aarch64 only", p.DefaultAction, p.Architectures)
	}
	unconditional := map[string]bool{}
	named := map[string]bool{}
	for _, s := range p.Syscalls {
		for _, n := range s.Names {
			named[n] = true
			unconditional[n] = unconditional[n] || (s.Action == "SCMP_ACT_ALLOW" && len(s.Args) == 0)
		}
	}
	for _, n := range jailSyscalls {
		if !unconditional[n] {
			t.Errorf("%s is not allowed unconditionally; the jail needs it", n)
		}
	}
	if len(named) < 300 {
		t.Errorf("only %d system calls named; the runtime default's list is missing", len(named))
	}
	for _, n := range []string{"keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "bpf", "perf_event_open",
		"userfaultfd", "setns", "fsopen", "fsmount", "move_mount", "open_tree", "init_module", "finit_module", "kexec_load",
		"open_by_handle_at", "chroot", "sethostname"} {
		if named[n] {
			t.Errorf("%s is allowed; the runtime default refuses it to a container without capabilities", n)
		}
	}
}

// TestSeccompProfileRunsTheJail runs the jail's own tests (consumers/sandbox/jail) under the
// chart's profile, loaded with libseccomp the way runc loads a pod's Localhost profile
// (testdata/seccomp/exec.py, Debian's python3-seccomp): the jail starts and runs jobs, also
// with --jail-proc=none under a masked /proc as in the pod. Then under the profile without each
// one of jailSyscalls: the jail no longer starts, so every addition is needed (clone3 by the
// per-job cgroup the root test stage gets: CLONE_INTO_CGROUP exists only in clone3). Needs root,
// as CI runs it: the jail tests run jobs under another uid and build a masked /proc.
func TestSeccompProfileRunsTheJail(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the jail's test binary")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (the jail's tests run jobs as uid 65534 and mount a masked /proc)")
	}
	const python = "/usr/bin/python3" // Debian's, where python3-seccomp installs the bindings
	if out, err := exec.Command(python, "-c", "import seccomp").CombinedOutput(); err != nil {
		t.Fatalf("libseccomp's Python bindings are missing (apt-get install python3-seccomp): %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "jail.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./consumers/sandbox/jail")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./consumers/sandbox/jail: %v\n%s", err, out)
	}
	run := func(profile string, tests string) (string, error) {
		out, err := exec.Command(python, "testdata/seccomp/exec.py", profile, bin, "-test.run", tests, "-test.count=1", "-test.v").CombinedOutput()
		return string(out), err
	}
	out, err := run(seccompFile, "^(TestJailProcModes|TestJailProcNoneMaskedProc)$")
	if err != nil {
		t.Fatalf("the jail under %s: %v\n%s", seccompFile, err, out)
	}
	for _, want := range []string{"--- PASS: TestJailProcModes/none", "--- PASS: TestJailProcNoneMaskedProc"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the jail under %s: no %q in\n%s", seccompFile, want, out)
		}
	}
	for _, drop := range jailSyscalls {
		t.Run("without "+drop, func(t *testing.T) {
			b, err := flattenedDefault(slices.DeleteFunc(slices.Clone(jailSyscalls), func(n string) bool { return n == drop }))
			if err != nil {
				t.Fatal(err)
			}
			profile := filepath.Join(t.TempDir(), "profile.json")
			if err := os.WriteFile(profile, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(profile, "^TestJailProcModes$")
			if err == nil || !strings.Contains(out, "cannot create a sandbox here") {
				t.Fatalf("the jail started under the profile without %s (%v):\n%s", drop, err, out)
			}
		})
	}
}
