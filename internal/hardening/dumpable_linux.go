package hardening

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetNonDumpable clears the process's dumpable flag (prctl PR_SET_DUMPABLE 0): its
// /proc/<pid>/environ, mem and maps become unreadable, and ptrace attaches fail, for every
// process without CAP_SYS_PTRACE, including those of the same uid; no core dump is written.
// The flag is not inherited across execve, so children run as usual.
func SetNonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Dumpable reports the process's dumpable flag (prctl PR_GET_DUMPABLE).
func Dumpable() (bool, error) {
	r, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err)
	}
	return r != 0, nil
}
