package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// hostileWaitEnv makes the re-executed stage wait for one line on stdin
// before it starts, so the test can move it into its delegated cgroups
// before it looks at /proc/self/cgroup.
const hostileWaitEnv = "WMRL_TEST_HOSTILE_WAIT"

// delegateCgroups gives uid a cgroup of its own in every hierarchy this
// (root) process uses — a child of its own cgroup, chowned to uid with the
// files a delegatee writes, as systemd's Delegate=yes does — and returns
// the function that moves a process into them. This is the set-up
// docs/security.md recommends for a non-root stage, and the one in which
// a job under the stage's uid could write itself out of its job cgroup.
func delegateCgroups(t *testing.T, uid int) (enter func(pid int) error) {
	t.Helper()
	homes, notes := jail.CgroupHomes()
	if len(homes) == 0 {
		t.Logf("no cgroups to delegate: %v", notes)
		return nil
	}
	name := fmt.Sprintf("wmrl-delegated-%d", os.Getpid())
	var dirs []string
	for _, home := range homes {
		dir := filepath.Join(home, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		for _, f := range []string{"", "cgroup.procs", "tasks", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Chown(filepath.Join(dir, f), uid, uid); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, dir := range dirs {
			// The stage removes its job cgroups; a leftover one is a failure.
			left, _ := filepath.Glob(filepath.Join(dir, "wmrl-*"))
			for _, l := range left {
				t.Errorf("delegated cgroup %s: job cgroup %s left behind", dir, l)
				_ = os.Remove(l)
			}
			var err error
			for i := 0; i < 100; i++ {
				if err = os.Remove(dir); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("remove delegated cgroup: %v", err)
			}
		}
	})
	return func(pid int) error {
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				return fmt.Errorf("move stage into %s: %w", dir, err)
			}
		}
		return nil
	}
}
