package jail

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInheritedOnExec marks every descriptor from 3 up close-on-exec, so
// that none reaches a job: Go opens its own with O_CLOEXEC, but one the
// stage inherited from its launcher without it (a password file a wrapper
// script held open) would otherwise pass through every fork and exec, bwrap
// included, into the job. The descriptors a job is meant to get are
// ExtraFiles, which the fork dup2s into place without the flag. New calls
// it, before any job starts; nothing in the stage opens descriptors without
// the flag later.
func closeInheritedOnExec() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Before Linux 5.11 (or where a filter denies close_range): one by one.
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("sandbox: mark inherited descriptors close-on-exec: close_range: %w; /proc/self/fd: %w", err, rerr)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is gone by now (EBADF): harmless.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("sandbox: mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}
