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
