package jail

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	// Outside x/sys/unix's constants: include/uapi/linux/audit.h.
	auditArchI386 = 0x40000003
	x32Bit        = 0x40000000
)

// The program handed to bwrap, run in x/net/bpf's interpreter on the
// seccomp_data of a call: what each call of the policy gets.
func TestSeccompProgram(t *testing.T) {
	f, err := buildSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	vm := seccompVM(t, f.prog)
	nr := func(name string) int32 {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no syscall %s on %s", name, info.Name)
		}
		return int32(n)
	}
	type call struct {
		name string
		nr   int32
		arch uint32
		args []uint64
		want uint32
	}
	native := uint32(info.ID)
	cases := []call{
		{"read", nr("read"), native, nil, retAllow},
		{"execve", nr("execve"), native, nil, retAllow},
		{"clone for a thread", nr("clone"), native, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND | unix.CLONE_FS | unix.CLONE_FILES}, retAllow},
		{"clone for fork", nr("clone"), native, []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"personality(0)", nr("personality"), native, []uint64{0}, retAllow},
		{"personality(ADDR_NO_RANDOMIZE)", nr("personality"), native, []uint64{0x0040000}, retEPERM},
		{"mount", nr("mount"), native, nil, retEPERM},
		{"clone3", nr("clone3"), native, nil, retENOSYS},
	}
	for _, name := range seccompDenied {
		cases = append(cases, call{name, nr(name), native, nil, retEPERM})
	}
	for bit := uint64(1); bit != 0; bit <<= 1 {
		if flag := bit & seccompNamespaceFlags; flag != 0 {
			cases = append(cases, call{fmt.Sprintf("clone %#x", flag), nr("clone"), native, []uint64{flag | uint64(unix.SIGCHLD)}, retEPERM})
		}
	}
	if info.ID == arch.X86_64.ID {
		i386 := arch.I386.SyscallNames
		cases = append(cases,
			call{"x32 getpid", nr("getpid") | x32Bit, native, nil, retENOSYS},
			call{"x32 read", nr("read") | x32Bit, native, nil, retENOSYS},
			// Allowed natively, denied on the 32-bit entry (int 0x80).
			call{"i386 getpid", int32(i386["getpid"]), auditArchI386, nil, retEPERM},
			call{"i386 read", int32(i386["read"]), auditArchI386, nil, retEPERM},
		)
	}
	for _, c := range cases {
		got, err := vm.Run(seccompData(c.nr, c.arch, c.args))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if uint32(got) != c.want {
			t.Errorf("%s: filter returns %#x, want %#x", c.name, uint32(got), c.want)
		}
	}
	if f.allowed < 250 || f.unknown == 0 {
		t.Errorf("policy counts: %d allowed, %d unknown; Docker's profile did not come through", f.allowed, f.unknown)
	}
	if !strings.Contains(f.String(), "sha256:"+f.digest()) || len(f.digest()) != 12 {
		t.Errorf("policy line: %s", f)
	}
}

// seccompVM loads the program from the bytes bwrap reads.
func seccompVM(t *testing.T, prog []byte) *bpf.VM {
	t.Helper()
	if len(prog)%8 != 0 || len(prog) == 0 || len(prog)/8 > 4096 {
		t.Fatalf("program of %d bytes is not 1..4096 sock_filter entries", len(prog))
	}
	var raw []bpf.Instruction
	for i := 0; i < len(prog); i += 8 {
		raw = append(raw, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(prog[i:]), Jt: prog[i+2], Jf: prog[i+3], K: binary.NativeEndian.Uint32(prog[i+4:])}.Disassemble())
	}
	vm, err := bpf.NewVM(raw)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// seccompData is struct seccomp_data as the interpreter reads it: it loads
// 32-bit words in network byte order, so each word is stored big-endian at
// the offset the kernel's native layout gives it.
func seccompData(nr int32, auditArch uint32, args []uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], uint32(nr))
	binary.BigEndian.PutUint32(b[4:], auditArch)
	little := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	for i, a := range args {
		lo, hi := 16+8*i, 16+8*i+4
		if !little {
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(b[lo:], uint32(a))
		binary.BigEndian.PutUint32(b[hi:], uint32(a>>32))
	}
	return b
}

func TestJailArgsSeccomp(t *testing.T) {
	s := jailSpec{bwrap: "bwrap", dir: "/tmp/job", files: []string{"a", "b"}, modes: []os.FileMode{0o600, 0o600}, tmpfsBytes: 1 << 20}
	args := jailArgs(s)
	if !slices.Contains(args, "--disable-userns") || slices.Contains(args, "--seccomp") {
		t.Errorf("without a filter: %v", args)
	}
	s.seccompFD = jailFD + 2
	args = jailArgs(s)
	i := slices.Index(args, "--seccomp")
	if i < 0 || args[i+1] != strconv.Itoa(jailFD+2) || !slices.Contains(args, "--disable-userns") {
		t.Errorf("with the filter on fd %d: %v", jailFD+2, args)
	}
	if end := slices.Index(args, "--"); i > end {
		t.Errorf("--seccomp after the command: %v", args)
	}
}

// seccompProbe is a python3 program run in the jail: the Seccomp mode of
// /proc/self/status, then the errno of each raw syscall given as NAME=NR
// (ctypes, so nothing between the program and the kernel).
const seccompProbe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for line in open("/proc/self/status"):
    if line.startswith(("Seccomp:", "NoNewPrivs:")):
        print(line.strip().replace("\t", " "))
buf = ctypes.create_string_buffer(256)
for arg in sys.argv[1:]:
    name, nr, *rest = arg.split("=")
    a = [int(x, 0) for x in rest] + [0] * 6
    ctypes.set_errno(0)
    if name == "io_uring_setup":
        a[1] = ctypes.addressof(buf)
    r = libc.syscall(int(nr), ctypes.c_long(a[0]), ctypes.c_long(a[1]), ctypes.c_long(a[2]), ctypes.c_long(a[3]), ctypes.c_long(a[4]))
    print("%s ret=%d errno=%s" % (name, r, os.strerror(ctypes.get_errno()) if r < 0 else "-"))
`

// A job in the default jail runs under the filter: the kernel reports
// seccomp mode 2 and the calls the policy denies fail with EPERM (clone3
// ENOSYS); with the filter off (weak) the same calls reach the kernel.
func TestSeccompInJail(t *testing.T) {
	// The system's: the jail shows /usr, not a home directory's shims.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed to make raw syscalls in the jail: %v", python, err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	nr := func(name string, args ...string) string {
		return strings.Join(append([]string{name, strconv.Itoa(info.SyscallNames[name])}, args...), "=")
	}
	calls := []string{
		// KEYCTL_GET_KEYRING_ID of the session keyring (-3), creating none.
		nr("keyctl", "0", "-3", "0"),
		nr("add_key"), nr("request_key"),
		nr("io_uring_setup", "1"),
		nr("unshare", strconv.Itoa(unix.CLONE_NEWUSER)),
		nr("setns", "-1", "0"),
		nr("bpf", "0"), nr("perf_event_open"), nr("userfaultfd"),
		nr("clone3", "0", "0"),
		nr("getpid"),
	}
	run := func(cfg Config) string {
		t.Helper()
		cfg.Limits, cfg.UseBwrap, cfg.RunAs = DefaultLimits(), true, privateRunAs()
		cfg.Logger = slog.New(slog.DiscardHandler)
		j, err := New(cfg, []string{python})
		if err != nil {
			t.Fatal(err)
		}
		o := j.Run(context.Background(), Job{Dir: t.TempDir(), Argv: append([]string{python, "-c", seccompProbe}, calls...),
			Env: []string{"PATH=" + DefaultPath}, Timeout: 30 * time.Second, StdoutMax: 16 << 10, StderrMax: 16 << 10})
		if o.SetupErr != nil || o.StartErr != nil || o.ExitCode != 0 {
			t.Fatalf("probe job: %+v\nstderr: %s", o, o.Stderr)
		}
		return string(o.Stdout)
	}
	on := run(Config{})
	t.Logf("filter on:\n%s", on)
	wantOn := []string{"Seccomp: 2", "NoNewPrivs: 1", "clone3 ret=-1 errno=Function not implemented", "getpid ret="}
	for _, c := range calls {
		if name, _, _ := strings.Cut(c, "="); name != "clone3" && name != "getpid" {
			wantOn = append(wantOn, name+" ret=-1 errno=Operation not permitted")
		}
	}
	for _, w := range wantOn {
		if !strings.Contains(on, w) {
			t.Errorf("filter on: no %q in\n%s", w, on)
		}
	}
	if strings.Contains(on, "getpid ret=-1") {
		t.Errorf("filter on: getpid, which it allows, failed:\n%s", on)
	}
	off := run(Config{NoSeccomp: true, AllowWeakContainment: true})
	t.Logf("filter off:\n%s", off)
	for _, w := range []string{"Seccomp: 0", "keyctl ret=", "io_uring_setup ret="} {
		if !strings.Contains(off, w) {
			t.Errorf("filter off: no %q in\n%s", w, off)
		}
	}
	for _, name := range []string{"keyctl", "io_uring_setup"} {
		if strings.Contains(off, name+" ret=-1 errno=Operation not permitted") {
			t.Errorf("filter off: %s still EPERM, so the test cannot tell the filter's denial from the host's:\n%s", name, off)
		}
	}
}

// The filter is on by default; off it is a weakness the stage refuses
// without --allow-weak-containment, and the containment line names the
// policy or says it is off.
func TestSeccompContainmentLine(t *testing.T) {
	_, err := New(Config{Limits: DefaultLimits(), UseBwrap: true, NoSeccomp: true, RunAs: privateRunAs()}, []string{"/bin/true"})
	if !errors.Is(err, ErrWeakContainment) || !strings.Contains(err.Error(), "--seccomp=false") {
		t.Errorf("filter off without --allow-weak-containment: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{}, []string{"seccomp=\"Docker default profile", "sha256:", "ABI " + runtimeArch(t) + " only", "weak=none"}},
		{Config{NoSeccomp: true, AllowWeakContainment: true}, []string{"seccomp=off", "no seccomp filter (--seccomp=false)"}},
	} {
		var buf bytes.Buffer
		tc.cfg.Limits, tc.cfg.UseBwrap, tc.cfg.RunAs = DefaultLimits(), true, privateRunAs()
		tc.cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		j, err := New(tc.cfg, []string{"/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		j.LogContainment()
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("containment line lacks %q: %s", w, buf.String())
			}
		}
	}
}

// privateRunAs is a job uid of this package's tests alone for a root test
// run (nil otherwise): RLIMIT_NPROC counts every process of a uid on the
// host, and 65534's budget is shared with every other sandbox on it.
func privateRunAs() *RunAs {
	if os.Geteuid() != 0 {
		return nil
	}
	return &RunAs{UID: 65519, GID: 65519}
}

func runtimeArch(t *testing.T) string {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return info.Name
}

// A descriptor the stage inherited without close-on-exec (a launcher's
// password file) does not reach a job, in the jail or out of it.
func TestInheritedDescriptorClosedOnExec(t *testing.T) {
	secret := fmt.Sprintf("inherited-secret-%d", time.Now().UnixNano())
	path := t.TempDir() + "/secret"
	if err := os.WriteFile(path, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// What a launcher's descriptor looks like: no FD_CLOEXEC.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("cat /proc/self/fd/%d; cat <&%d; ls -l /proc/self/fd/ >&2", fd, fd)
	for _, cfg := range []Config{
		{UseBwrap: true},
		{Containment: ContainmentProcessGroup, AllowWeakContainment: true},
	} {
		cfg.Logger, cfg.RunAs = slog.New(slog.DiscardHandler), privateRunAs()
		j, err := New(cfg, []string{"/bin/sh"})
		if err != nil {
			t.Fatal(err)
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("after New, the inherited descriptor %d has flags %#x (%v), want FD_CLOEXEC", fd, flags, err)
		}
		// Reachable by the job's uid without the jail (t.TempDir's parent is 0700).
		dir, err := os.MkdirTemp("/var/tmp", "wmrl-fd-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		o := j.Run(context.Background(), Job{Dir: dir, Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=" + DefaultPath},
			Timeout: 30 * time.Second, StdoutMax: 4 << 10, StderrMax: 4 << 10})
		if o.SetupErr != nil || o.StartErr != nil {
			t.Fatalf("job: %+v", o)
		}
		if strings.Contains(string(o.Stdout), secret) {
			t.Errorf("bwrap=%v: the job read the inherited descriptor %d: %s", cfg.UseBwrap, fd, o.Stdout)
		}
		t.Logf("bwrap=%v: job's descriptors:\n%s", cfg.UseBwrap, o.Stderr)
		// Marked again for the next configuration's New to find unmarked.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			t.Fatal(err)
		}
	}
}
