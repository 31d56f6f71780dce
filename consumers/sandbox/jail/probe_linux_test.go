package jail

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A job uid at its RLIMIT_NPROC (other processes of the uid on the host) makes bwrap fail with
// EAGAIN. The start-up probe says so, with the count and the way out, instead of blaming user
// namespaces; and it waits for the uid's processes to exit before it refuses to start.
func TestProbeJobUIDAtProcessLimit(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs processes as another uid")
	}
	const uid, limit = 65521, 4
	saved := probePatience
	t.Cleanup(func() { probePatience = saved })
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
	cfg := Config{Limits: Limits{Processes: limit}, UseBwrap: true, RunAs: &RunAs{UID: uid, GID: uid}}

	probePatience = 10 * time.Millisecond
	cmds := hold()
	_, err := New(cfg, []string{"/bin/true"})
	release(cmds)
	if !errors.Is(err, ErrBwrapUnusable) || !errors.Is(err, errProbeEAGAIN) {
		t.Fatalf("New with uid %d at its process limit: %v, want ErrBwrapUnusable and errProbeEAGAIN", uid, err)
	}
	for _, want := range []string{"it has 4 processes", "--max-procs is 4", "--run-as"} {
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
