package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The hostile suite's kernel-surface attacks (issue 34): the keyrings, nested
// user namespaces, io_uring, a descriptor the stage inherited, and the other
// system-call ABIs. The jail's answer is the seccomp filter and bwrap
// --disable-userns (jail/seccomp_linux.go, jail/bwrap_linux.go) and marking
// inherited descriptors close-on-exec (jail/fds_linux.go). As in
// hostile_attacks_linux_test.go, the job prints what it got and the host
// judges: a secret or a marker the job could only have read, a namespace or
// ring it reports with the kernel's own answer.

// hostileKernelAttacks are appended to the table's rows (init below), so
// this file adds its rows without touching the list other attacks share.
var hostileKernelAttacks = []struct{ name, what string }{
	{"keyring-stage", "read a key from the stage's session keyring"},
	{"keyring-carry", "leave a key in the keyrings that the next job reads"},
	{"userns-unshare", "create a nested user namespace (`unshare -U`)"},
	{"userns-clone", "create a nested user namespace (`clone` with `CLONE_NEWUSER`)"},
	{"io-uring", "set up an io_uring (`io_uring_setup`)"},
	{"inherited-fd", "read a descriptor the stage inherited from its launcher (fd N, `/proc/self/fd/N`)"},
	{"abi-i386", "make a 32-bit system call (`int 0x80` getpid)"},
	{"abi-x32", "make an x32 system call (getpid with `__X32_SYSCALL_BIT`)"},
}

func init() {
	hostileAttacks = append(hostileAttacks, hostileKernelAttacks...)
}

const (
	// hostileLaunchedEnv marks a stage that went through hostileStageLaunch.
	hostileLaunchedEnv = "WMRL_TEST_HOSTILE_LAUNCHED"
	// hostileInheritedFD is the descriptor the launcher leaves open, without
	// close-on-exec, on a file holding the secret.
	hostileInheritedFD = 42
	// hostileStageKey is the description of the key the stage keeps in its
	// session keyring, with the secret as payload.
	hostileStageKey = "wmrl-hostile-stage-secret"
	// hostileABIHelper is the static program of the abi-i386 attack, next to
	// the hostile binary (testdata/abi.c).
	hostileABIHelper = "abi"
)

// hostileStageLaunch makes the stage what a service manager and a careless
// wrapper would: it gives the process a session keyring of its own holding
// the secret (systemd gives every service one) and leaves a descriptor on a
// file with the secret open without close-on-exec, then execs the stage
// again with both. The keyring is joined on a locked thread and the exec
// keeps that thread's credentials, so every thread of the stage has it.
// After the exec (hostileLaunchedEnv set) it only checks that both are
// there, so an attack that finds nothing is not a broken fixture.
func hostileStageLaunch(base string) error {
	secret := os.Getenv(hostileSecretEnv)
	if os.Getenv(hostileLaunchedEnv) != "" {
		id, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", hostileStageKey, 0)
		if err != nil {
			return fmt.Errorf("the stage's own key: %w", err)
		}
		if got, err := readKey(id); err != nil || got != secret {
			return fmt.Errorf("the stage's own key reads %q, %v", got, err)
		}
		b := make([]byte, len(secret))
		if n, err := unix.Pread(hostileInheritedFD, b, 0); err != nil || string(b[:n]) != secret {
			return fmt.Errorf("the inherited descriptor %d reads %q, %v", hostileInheritedFD, b[:n], err)
		}
		return nil
	}
	runtime.LockOSThread()
	if _, err := unix.KeyctlJoinSessionKeyring("wmrl-hostile-stage"); err != nil {
		return fmt.Errorf("join a session keyring: %w", err)
	}
	if _, err := unix.AddKey("user", hostileStageKey, []byte(secret), unix.KEY_SPEC_SESSION_KEYRING); err != nil {
		return fmt.Errorf("add the stage's key: %w", err)
	}
	path := filepath.Join(base, "launcher-secret")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := unix.Dup3(int(f.Fd()), hostileInheritedFD, 0); err != nil {
		return fmt.Errorf("leave descriptor %d open: %w", hostileInheritedFD, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(self, os.Args, append(os.Environ(), hostileLaunchedEnv+"=1"))
}

func readKey(id int) (string, error) {
	b := make([]byte, 256)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, b, 0)
	if err != nil {
		return "", err
	}
	return string(b[:min(n, len(b))]), nil
}

// buildABIHelper compiles testdata/abi.c, static, into dir (next to the
// hostile binary, so the jail shows it). gcc without -m32 multilib is
// enough: the program is 64-bit and enters the kernel through int 0x80.
func buildABIHelper(t *testing.T, dir string) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Fatalf("the abi-i386 attack is written for amd64, not %s", runtime.GOARCH)
	}
	src, err := filepath.Abs("testdata/abi.c")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gcc", "-static", "-O2", "-o", filepath.Join(dir, hostileABIHelper), src).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc (with libc6-dev for -static) builds the abi-i386 attack's program: %v\n%s", err, out)
	}
}

// runKernelAttack runs one of hostileKernelAttacks and judges it; ok is
// false for any other attack.
func runKernelAttack(e *CommandExecutor, fx hostileFixture, attack string) (o hostileOutcome, detail string, ok bool) {
	known := false
	for _, a := range hostileKernelAttacks {
		known = known || a.name == attack
	}
	if !known {
		return "", "", false
	}
	run := func(args ...string) (string, string) {
		res := e.Execute(context.Background(), Job{Artifact: []byte(strings.Join(append([]string{"attack", attack}, args...), " "))})
		return res.StderrTail, fmt.Sprintf("%s %s: %s", res.Status, res.Reason, lastLines(res.StderrTail, 4))
	}
	var tail string
	allowed := false
	switch attack {
	case "keyring-carry":
		// The first job leaves a key, the second looks for it.
		marker := fmt.Sprintf("carry-%d-%d", os.Getpid(), time.Now().UnixNano())
		left, leftDetail := run("leave", marker)
		if !strings.Contains(left, "attack-ran "+attack) {
			return "did not run", leftDetail, true
		}
		tail, detail = run("find", marker)
		detail = leftDetail + " / " + detail
		allowed = strings.Contains(tail, "stolen "+marker)
	case "keyring-stage", "inherited-fd":
		tail, detail = run(strconv.Itoa(hostileInheritedFD))
		allowed = strings.Contains(tail, fx.secret)
	case "userns-unshare", "userns-clone":
		tail, detail = run()
		allowed = strings.Contains(tail, "userns created")
	case "io-uring":
		tail, detail = run()
		allowed = strings.Contains(tail, "io_uring fd=")
	case "abi-i386":
		tail, detail = run()
		allowed = strings.Contains(tail, "i386-getpid=") && !strings.Contains(tail, "i386-getpid=-")
	case "abi-x32":
		tail, detail = run()
		allowed = strings.Contains(tail, "x32 getpid=") && !strings.Contains(tail, "x32 getpid=-")
	}
	switch {
	case !strings.Contains(tail, "attack-ran "+attack):
		return "did not run", detail, true
	case allowed:
		return outcomeAllowed, detail, true
	}
	return outcomeBlocked, detail, true
}

// hostileKernelJob is the job's side of hostileKernelAttacks ("attack NAME
// ARGS…", "attack-ran" already printed); ok is false for any other name.
func hostileKernelJob(args []string) (code int, ok bool) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	say := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	switch args[0] {
	case "keyring-stage":
		// The stage's key by description in every keyring the job can name.
		for _, ring := range []int{unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING, unix.KEY_SPEC_PROCESS_KEYRING} {
			id, err := unix.KeyctlSearch(ring, "user", hostileStageKey, 0)
			if err != nil {
				say("search keyring %d: %v", ring, err)
				continue
			}
			got, err := readKey(id)
			say("stolen %s (%v)", got, err)
		}
	case "keyring-carry":
		desc := "wmrl-hostile-" + arg(2)
		rings := []int{unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING}
		if arg(1) == "leave" {
			for _, ring := range rings {
				_, err := unix.AddKey("user", desc, []byte(arg(2)), ring)
				say("add key to keyring %d: %v", ring, err)
			}
			break
		}
		for _, ring := range rings {
			id, err := unix.KeyctlSearch(ring, "user", desc, 0)
			if err != nil {
				say("search keyring %d: %v", ring, err)
				continue
			}
			got, err := readKey(id)
			say("stolen %s (%v)", got, err)
		}
	case "userns-unshare":
		out, err := exec.Command("unshare", "-U", "true").CombinedOutput()
		if err == nil {
			say("userns created by unshare -U")
		}
		say("unshare -U: %v %s", err, strings.TrimSpace(string(out)))
	case "userns-clone":
		self, _ := os.Executable()
		c := exec.Command(self, "attack", "noop")
		c.Env = os.Environ()
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
		err := c.Run()
		if err == nil {
			say("userns created by clone(CLONE_NEWUSER)")
		}
		say("clone CLONE_NEWUSER: %v", err)
	case "noop":
	case "io-uring":
		var params [120]byte // struct io_uring_params, zeroed
		fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params)), 0)
		if errno == 0 {
			say("io_uring fd=%d", fd)
			unix.Close(int(fd))
		}
		say("io_uring_setup: %v", errno)
	case "inherited-fd":
		// The launcher's descriptor by number and through /proc, then every
		// descriptor the job holds.
		fd, _ := strconv.Atoi(arg(1))
		b := make([]byte, 256)
		n, err := unix.Pread(fd, b, 0)
		say("read fd %d: %q %v", fd, b[:max(n, 0)], err)
		p, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
		say("read /proc/self/fd/%d: %q %v", fd, p, err)
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if n, _ := strconv.Atoi(e.Name()); n > 2 {
				p, err := os.ReadFile("/proc/self/fd/" + e.Name())
				say("read /proc/self/fd/%s: %.64q %v", e.Name(), p, err)
			}
		}
	case "abi-i386":
		self, _ := os.Executable()
		out, err := exec.Command(filepath.Join(filepath.Dir(self), hostileABIHelper)).CombinedOutput()
		say("%s (%v)", strings.TrimSpace(string(out)), err)
	case "abi-x32":
		const x32Bit = 0x40000000
		pid, _, errno := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		if errno != 0 {
			say("x32 getpid=-%d (%v)", int(errno), errno)
		} else {
			say("x32 getpid=%d", pid)
		}
	default:
		return 0, false
	}
	fmt.Println(`{"score": 0}`)
	return 0, true
}
