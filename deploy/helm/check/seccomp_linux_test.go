package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
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
