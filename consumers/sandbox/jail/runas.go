package jail

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RunAs is the unprivileged identity the child runs as.
type RunAs struct{ UID, GID uint32 }

// UIDRange is a range of uids, First to Last inclusive, one per pool slot:
// slot i's jobs run as uid and gid First+i, so a uid's RLIMIT_NPROC is one
// slot's process budget where no pids cgroup per job holds it.
type UIDRange struct{ First, Last uint32 }

// maxUIDRange bounds a range: the start-up check visits every uid.
const maxUIDRange = 1 << 16

// Size is the number of uids, so the most slots the range serves.
func (r UIDRange) Size() int { return int(r.Last-r.First) + 1 }

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ErrRunAsRange is wrapped by a bad --run-as-range.
var ErrRunAsRange = fmt.Errorf("%w: --run-as-range", ErrConfig)

// ParseUIDRange parses "FIRST-LAST" and checks it (see UIDRange.check).
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("%w %q: want FIRST-LAST (uids, e.g. 100000-100063)", ErrRunAsRange, s)
	}
	r := UIDRange{First: uint32(first), Last: uint32(last)}
	return r, r.check()
}

// check refuses a range that is empty, too large, or holds a uid that is not
// the jobs' alone: root, nobody (DefaultRunAs, shared with other programs),
// the invalid uid (uint32 max) or the stage's own uid.
func (r UIDRange) check() error {
	euid := uint32(os.Geteuid())
	switch {
	case r.First > r.Last:
		return fmt.Errorf("%w %s: first uid above last", ErrRunAsRange, r)
	case r.Size() > maxUIDRange:
		return fmt.Errorf("%w %s: %d uids, at most %d", ErrRunAsRange, r, r.Size(), maxUIDRange)
	case r.First == 0:
		return fmt.Errorf("%w %s: holds root", ErrRunAsRange, r)
	case r.First <= DefaultRunAs.UID && DefaultRunAs.UID <= r.Last:
		return fmt.Errorf("%w %s: holds %d (nobody), which other programs share", ErrRunAsRange, r, DefaultRunAs.UID)
	case r.Last == ^uint32(0):
		return fmt.Errorf("%w %s: holds %d, the invalid uid", ErrRunAsRange, r, r.Last)
	case r.First <= euid && euid <= r.Last:
		return fmt.Errorf("%w %s: holds the stage's own uid %d", ErrRunAsRange, r, euid)
	}
	return nil
}

// uid is slot's identity.
func (r UIDRange) uid(slot int) (*RunAs, error) {
	if slot < 0 || slot >= r.Size() {
		return nil, fmt.Errorf("%w %s: slot %d has no uid (%d uids for slots 0–%d)", ErrRunAsRange, r, slot, r.Size(), r.Size()-1)
	}
	id := r.First + uint32(slot)
	return &RunAs{UID: id, GID: id}, nil
}

// DefaultRunAs is the identity of a root stage's jobs when RunAs is nil:
// nobody, so a job owns no file on the host and RLIMIT_NPROC binds it.
// Give the sandbox a uid of its own with RunAs where the host has one.
var DefaultRunAs = RunAs{UID: 65534, GID: 65534}
