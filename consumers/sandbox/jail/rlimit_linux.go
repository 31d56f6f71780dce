package jail

import (
	"cmp"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// prlimitPrefix returns the argv prefix that applies l to the child.
//
// Why prlimit(1) and not the alternatives: Go's os/exec has no hook between
// fork and exec, so limits cannot be set "in the child" from Go. Calling
// prlimit(2) on the pid after Start is racy (the untrusted code is already
// running and may fork or allocate first). A Go re-exec shim would need a
// hook in every host binary, and setting RLIMIT_AS inside a Go runtime that
// has already reserved address space can crash the shim before it execs.
// prlimit(1) from util-linux (Essential on Debian) is a small C program that
// calls setrlimit on itself and then execs the command, so the limits are in
// place before the first instruction of untrusted code, with no race. Core
// dumps are always disabled so SIGXCPU/SIGSEGV do not fill the disk.
func prlimitPrefix(path string, l Limits) ([]string, error) {
	path = cmp.Or(path, "prlimit")
	p, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPrlimitMissing, err)
	}
	args := []string{p, "--core=0"}
	if l.CPUSeconds > 0 {
		// soft < hard: SIGXCPU first, SIGKILL one second later.
		args = append(args, fmt.Sprintf("--cpu=%d:%d", l.CPUSeconds, l.CPUSeconds+1))
	}
	if l.AddressSpaceBytes > 0 {
		args = append(args, fmt.Sprintf("--as=%d", l.AddressSpaceBytes))
	}
	if l.Processes > 0 {
		args = append(args, fmt.Sprintf("--nproc=%d", l.Processes))
	}
	if l.FileSizeBytes > 0 {
		args = append(args, fmt.Sprintf("--fsize=%d", l.FileSizeBytes))
	}
	return append(args, "--"), nil
}

// perUserNSNproc reports whether the kernel counts RLIMIT_NPROC per user
// namespace (Linux 5.14 and later, "ucounts" rlimits): then a limit set
// inside the jail's user namespace is the job's own.
func perUserNSNproc() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 14)
}

// kernelAtLeast compares a release string ("6.1.0-18-amd64") with major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// stageNproc is this process's RLIMIT_NPROC, which the jail's bwrap inherits.
func stageNproc() string {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &r) != nil {
		return "?"
	}
	if r.Cur == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(r.Cur, 10)
}
