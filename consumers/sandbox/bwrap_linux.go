package sandbox

import (
	"fmt"
	"os/exec"
)

func findBwrap(path string) (string, error) {
	if path == "" {
		path = "bwrap"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBwrapMissing, err)
	}
	return p, nil
}

// bwrapArgs isolates the child: no network (--unshare-net), read-only view
// of the host, fresh /dev, /proc and /tmp, only the job directory writable.
// --unshare-pid makes bubblewrap the init of a PID namespace, so every
// descendant dies with it even if it escaped our process group with setsid;
// --die-with-parent ties that init to the bwrap monitor we SIGKILL.
// --new-session stops TIOCSTI injection into a controlling terminal.
func bwrapArgs(path, dir string) []string {
	return []string{
		path,
		"--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--die-with-parent", "--new-session",
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
		"--bind", dir, dir,
		"--chdir", dir,
		"--",
	}
}
