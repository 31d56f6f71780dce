package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procProbe is a job that reports whether it has a /proc, whether the stage's process is
// reachable from it (kill -0 on the stage's pid) and how many processes its /proc lists.
func procProbe(stagePID int) []string {
	return []string{"/bin/sh", "-c", `if [ -e /proc ]; then echo "proc: yes $(ls -d /proc/[0-9]* | wc -l) pids"; else echo "proc: no"; fi
if kill -0 ` + strconv.Itoa(stagePID) + ` 2>/dev/null; then echo "stage: visible"; else echo "stage: hidden"; fi
echo done`}
}

// runProcProbe starts a jail with cfg and runs procProbe in it.
func runProcProbe(t *testing.T, cfg Config) string {
	t.Helper()
	j, err := New(cfg, []string{"/bin/sh"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	o := j.Run(context.Background(), Job{Dir: t.TempDir(), Argv: procProbe(os.Getpid()), Env: []string{"PATH=" + DefaultPath},
		Timeout: 30 * time.Second, StdoutMax: 4 << 10, StderrMax: 4 << 10})
	if o.SetupErr != nil || o.StartErr != nil || o.ExitCode != 0 {
		t.Fatalf("job: setup %v, start %v, exit %d, stderr %q", o.SetupErr, o.StartErr, o.ExitCode, o.Stderr)
	}
	return string(o.Stdout)
}

// The jail's /proc modes: private mounts a /proc of the job's PID namespace (its two processes,
// the jail's init and the shell, and their children), none mounts nothing. In neither can the job
// reach the stage's process.
func TestJailProcModes(t *testing.T) {
	for _, c := range []struct {
		mode ProcMode
		want string
	}{
		{ProcPrivate, "proc: yes"},
		{ProcNone, "proc: no"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			out := runProcProbe(t, Config{UseBwrap: true, Proc: c.mode})
			if !strings.Contains(out, c.want) || !strings.Contains(out, "stage: hidden") || !strings.Contains(out, "done") {
				t.Fatalf("job output %q, want %q and the stage hidden", out, c.want)
			}
			var n int
			if _, err := fmt.Sscanf(out, "proc: yes %d pids", &n); c.mode == ProcPrivate && (err != nil || n > 8) {
				t.Errorf("private /proc: %q, want only the job's own few processes listed (%v)", out, err)
			}
		})
	}
	if _, err := New(Config{UseBwrap: true, Proc: "host"}, []string{"/bin/sh"}); !errors.Is(err, ErrUnknownProcMode) || !errors.Is(err, ErrConfig) {
		t.Errorf("New with Proc host: %v, want ErrUnknownProcMode", err)
	}
}

// maskedProcEnv marks the re-executed test binary of TestJailProcNoneMaskedProc.
const maskedProcEnv = "WMRL_TEST_JAIL_MASKED_PROC"

// A pod with procMount: Default (what Pod Security baseline requires) gets a /proc with paths
// masked by bind mounts, and the kernel refuses a new proc mount in a user namespace under a
// /proc it cannot fully see. The test builds that situation — a private mount namespace with
// files of /proc covered by /dev/null and /proc/sys read-only, as container runtimes do — and
// re-runs itself inside it: there the default jail (private /proc) refuses to start, naming
// bwrap's error, and the jail with ProcNone runs jobs that see no process.
func TestJailProcNoneMaskedProc(t *testing.T) {
	if os.Getenv(maskedProcEnv) == "" {
		if os.Getuid() != 0 {
			t.Skip("needs root: builds a mount namespace with a masked /proc")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Fatalf("unshare(1) (util-linux) is missing: %v", err)
		}
		mask := `set -e
for p in /proc/keys /proc/timer_list /proc/sched_debug /proc/kcore; do [ -e "$p" ] && mount --bind /dev/null "$p"; done
mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
exec "$@"`
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", mask, "sh",
			os.Args[0], "-test.run", "^TestJailProcNoneMaskedProc$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), maskedProcEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestJailProcNoneMaskedProc") {
			t.Fatalf("in a mount namespace with a masked /proc: %v\n%s", err, out)
		}
		return
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil || !strings.Contains(string(mounts), " /proc/sys ro,") {
		t.Fatalf("the re-executed test does not see the masked /proc: %v\n%s", err, mounts)
	}
	_, err = New(Config{UseBwrap: true}, []string{"/bin/sh"})
	if !errors.Is(err, ErrBwrapUnusable) || !strings.Contains(err.Error(), "Can't mount proc") {
		t.Fatalf("default jail under a masked /proc: %v, want ErrBwrapUnusable with bwrap's proc mount error", err)
	}
	out := runProcProbe(t, Config{UseBwrap: true, Proc: ProcNone})
	if !strings.Contains(out, "proc: no") || !strings.Contains(out, "stage: hidden") || !strings.Contains(out, "done") {
		t.Fatalf("ProcNone job under a masked /proc: %q, want no /proc and the stage hidden", out)
	}
}
