package jail

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A job uid at the RLIMIT_NPROC the jail inherits from the stage (other processes of the uid on
// the host) makes the jail fail with EAGAIN. The start-up probe says so, with the count and the
// way out, instead of blaming user namespaces; and it waits for the uid's processes to exit before
// it refuses to start. (The job's own --max-procs applies inside the jail's user namespace, where
// the uid's processes elsewhere do not count.)
func TestProbeJobUIDAtProcessLimit(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs processes as another uid")
	}
	const uid, limit = 65521, 4
	savedPatience := probePatience
	t.Cleanup(func() { probePatience = savedPatience })
	hold := func() []*exec.Cmd {
		var cmds []*exec.Cmd
		for range limit {
			c := exec.Command("sleep", "60")
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
		return cmds
	}
	release := func(cmds []*exec.Cmd) {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	cfg := Config{Limits: Limits{Processes: 256}, UseBwrap: true, RunAs: &RunAs{UID: uid, GID: uid}}
	// The stage's own RLIMIT_NPROC (root ignores it for itself) is what the jail's bwrap inherits.
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &saved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NPROC, &saved) })
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: limit, Max: saved.Max}); err != nil {
		t.Fatal(err)
	}

	probePatience = 10 * time.Millisecond
	cmds := hold()
	_, err := New(cfg, []string{"/bin/true"})
	release(cmds)
	if !errors.Is(err, ErrBwrapUnusable) || !errors.Is(err, errProbeEAGAIN) {
		t.Fatalf("New with uid %d at its process limit: %v, want ErrBwrapUnusable and errProbeEAGAIN", uid, err)
	}
	for _, want := range []string{"it has 4 processes", "RLIMIT_NPROC, which the jail inherits, is 4", "--run-as-range"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	probePatience = 5 * time.Second
	cmds = hold()
	time.AfterFunc(500*time.Millisecond, func() { release(cmds) })
	if _, err := New(cfg, []string{"/bin/true"}); err != nil {
		t.Fatalf("New once the uid's processes exited: %v", err)
	}
}
