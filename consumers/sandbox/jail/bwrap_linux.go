package jail

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func findBwrap(path string) (string, error) {
	path = cmp.Or(path, "bwrap")
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBwrapMissing, err)
	}
	return p, nil
}

// jailSystemPaths are the host directories every job sees, read-only: the
// programs and libraries, nothing with data. A path missing on the host is
// skipped (--ro-bind-try).
var jailSystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// jailEtcFiles are the only parts of /etc a job sees: name resolution,
// users, the dynamic loader, certificates and time zones. The rest of /etc
// stays hidden because that is where stages keep credentials and keys
// (/etc/wmrl, mounted Kubernetes Secrets, /etc/shadow).
var jailEtcFiles = []string{
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/ssl/certs", "/etc/ca-certificates", "/etc/localtime", "/etc/timezone", "/etc/mime.types",
}

// jailFD is the first descriptor passed to bubblewrap: the artifact, then
// rollout.json, copied into the job's tmpfs with --file.
const jailFD = 3

// jailSpec is one job's jail.
type jailSpec struct {
	bwrap        string
	dir          string   // the job directory: a fresh tmpfs at the same path
	files        []string // names inside dir, fed from fds jailFD, jailFD+1, …
	modes        []os.FileMode
	tmpfsBytes   uint64
	allowNetwork bool
	readOnly     []string // extra host paths visible read-only
	noProc       bool     // no /proc in the jail (ProcNone)
	seccompFD    int      // the filter's descriptor (after the files), 0 for none
	usernsOpen   bool     // without --disable-userns (see Jail.usernsOpen)
}

// jailArgs is the bubblewrap command line of the jail: a user namespace
// with every capability dropped (so even a root stage's job has no
// privilege over anything, and `mount -o remount` fails), its own PID
// namespace with its own /proc, or none with ProcNone (the host's processes
// and their environments are invisible), no network unless allowNetwork, IPC and UTS namespaces,
// a read-only root holding only jailSystemPaths, jailEtcFiles and the
// configured extras (no /sys, so no cgroupfs to escape through; no /home,
// /root, /var or repository), and three size-limited private tmpfs: the job
// directory, /tmp and /dev/shm. / and /dev are remounted read-only, so the
// tmpfs are the only writable places and their size is the job's disk
// quota. --die-with-parent ties the jail to the bwrap monitor the executor
// kills; --new-session stops TIOCSTI injection. --disable-userns stops the
// job from making a user namespace of its own (which would give it
// capabilities over new mounts); --seccomp installs the system-call filter
// (seccomp_linux.go) as bwrap's last step before exec.
func jailArgs(s jailSpec) []string {
	size := strconv.FormatUint(s.tmpfsBytes, 10)
	args := []string{
		s.bwrap,
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--cap-drop", "ALL",
		"--die-with-parent", "--new-session",
	}
	if !s.usernsOpen {
		args = append(args, "--disable-userns")
	}
	if s.seccompFD != 0 {
		args = append(args, "--seccomp", strconv.Itoa(s.seccompFD))
	}
	if !s.allowNetwork {
		args = append(args, "--unshare-net")
	}
	for _, p := range jailSystemPaths {
		args = append(args, "--ro-bind-try", p, p)
	}
	for _, p := range jailEtcFiles {
		args = append(args, "--ro-bind-try", p, p)
	}
	if !s.noProc {
		args = append(args, "--proc", "/proc")
	}
	args = append(args,
		"--dev", "/dev",
		"--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
		"--perms", "1777", "--size", size, "--tmpfs", "/tmp",
	)
	// After the private /tmp, so that a configured path under /tmp (a checkout in a temporary
	// directory, a scorer unpacked there) is bound on top of it instead of being hidden by it.
	for _, p := range s.readOnly {
		args = append(args, "--ro-bind", p, p)
	}
	args = append(args, "--perms", "0700", "--size", size, "--tmpfs", s.dir)
	for i, name := range s.files {
		args = append(args, "--perms", fmt.Sprintf("%04o", s.modes[i].Perm()), "--file", strconv.Itoa(jailFD+i), filepath.Join(s.dir, name))
	}
	return append(args, "--remount-ro", "/", "--chdir", s.dir, "--")
}

// jailReadOnlyPaths are the extra read-only paths of the jail: the
// configured ones plus the directory of every absolute, existing argv
// element that lies outside the system paths (the scorer and its siblings),
// so `--argv /opt/eval/run.py` works without naming its directory twice.
func jailReadOnlyPaths(extra, argv []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		p = filepath.Clean(p)
		if seen[p] || underAny(p, jailSystemPaths) {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	for _, p := range extra {
		add(p)
	}
	for _, a := range argv {
		if !filepath.IsAbs(a) || strings.Contains(a, "{") {
			continue
		}
		if st, err := os.Stat(a); err == nil && !st.IsDir() {
			add(filepath.Dir(a))
		}
	}
	return out
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// checkReachable fails when the job's uid cannot reach a path the jail
// binds (bwrap resolves a bind's source as that uid, so a directory it
// cannot search would fail every job with "Can't find source path"). It
// checks search permission on every ancestor and read permission on the
// path itself; uid 0 reaches everything.
func checkReachable(paths []string, ra *RunAs) error {
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	if ra != nil {
		uid, gid = ra.UID, ra.GID
	}
	if uid == 0 {
		return nil
	}
	allowed := func(st *syscall.Stat_t, bit uint32) bool {
		switch {
		case st.Uid == uid:
			return st.Mode&(bit<<6) != 0
		case st.Gid == gid:
			return st.Mode&(bit<<3) != 0
		}
		return st.Mode&bit != 0
	}
	for _, p := range paths {
		var st syscall.Stat_t
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			if err := syscall.Stat(dir, &st); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrConfig, dir, err)
			}
			if !allowed(&st, 1) {
				return fmt.Errorf("%w: the job's uid %d cannot reach %s: %s is mode %04o, owner %d:%d (make it searchable, move the program, or pick --run-as)", ErrConfig, uid, p, dir, st.Mode&0o7777, st.Uid, st.Gid)
			}
			if dir == "/" {
				break
			}
		}
		if err := syscall.Stat(p, &st); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfig, p, err)
		}
		bit := uint32(4) // read a file; search a directory
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			bit = 1
		}
		if !allowed(&st, bit) {
			return fmt.Errorf("%w: the job's uid %d cannot read %s (mode %04o, owner %d:%d)", ErrConfig, uid, p, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return nil
}
