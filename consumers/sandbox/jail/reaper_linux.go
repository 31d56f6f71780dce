package jail

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bwrap's monitor exits as soon as the jail's init reports the job's exit status, before that
// init has been reaped, so every job leaves one orphaned zombie ("bwrap", a session leader:
// --new-session). Orphans go to the nearest subreaper or to PID 1; a PID 1 that reaps late (or
// this stage itself as a container's PID 1) lets them pile up, and since they still count
// against the job uid's RLIMIT_NPROC, jobs start failing with "Cannot fork" after a few hundred.
// The stage therefore becomes a child subreaper and reaps exactly those orphans: zombies whose
// parent is this process, named bwrap and leading their own session. The executor's own
// children (the monitors) lead no session (Setpgid only), so os/exec keeps waiting for them.

var reaperOnce sync.Once

// reapJailOrphans makes this process a child subreaper and starts the reaping loop, once.
func reapJailOrphans() {
	reaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return // orphans go to PID 1, as before
		}
		go func() {
			for range time.Tick(100 * time.Millisecond) {
				reapOrphanedJails(os.Getpid())
			}
		}()
	})
}

// reapOrphanedJails waits for every zombie child of self that is an orphaned jail init.
func reapOrphanedJails(self int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if orphanedJail(pid, self) {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// orphanedJail reads /proc/<pid>/stat: "pid (comm) state ppid pgrp session ...".
func orphanedJail(pid, self int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open || string(b[open+1:closing]) != "bwrap" {
		return false
	}
	f := bytes.Fields(b[closing+1:])
	if len(f) < 4 || string(f[0]) != "Z" {
		return false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	return err1 == nil && err2 == nil && ppid == self && sid == pid
}
