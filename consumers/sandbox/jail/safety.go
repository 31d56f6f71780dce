package jail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
)

// ErrWeakContainment is returned by New when the
// configuration is weaker than the jail (no bubblewrap, no seccomp filter,
// or jobs under the stage's uid or root) and AllowWeakContainment is not set. The message
// names every weakness in one line.
var ErrWeakContainment = errors.New("sandbox: containment weaker than the jail")

// weaknesses lists what makes cfg (defaults applied) weaker than the jail,
// as the start-up log and error say it; seccompErr is why the filter could
// not be installed (nil if it was, or was not asked for).
func weaknesses(cfg Config, seccompErr error) []string {
	var w []string
	if !cfg.UseBwrap {
		w = append(w, "no jail (--bwrap=false): the job sees the host's /proc (every process's environment of its uid), file system and network, and writes outside its directory without a quota")
	}
	const reach = "the job reaches every system call (io_uring, the keyrings, nested user namespaces on a host that allows them, bpf, other ABIs)"
	switch {
	case cfg.NoSeccomp:
		w = append(w, "no seccomp filter (--seccomp=false): "+reach)
	case !cfg.UseBwrap:
		w = append(w, "no seccomp filter (bwrap installs it, and the jail is off): "+reach)
	case seccompErr != nil:
		w = append(w, fmt.Sprintf("no seccomp filter (it cannot be installed here: %v): %s", seccompErr, reach))
	}
	euid := os.Geteuid()
	switch {
	case cfg.RunAs != nil && cfg.RunAs.UID == 0:
		w = append(w, "jobs run as root (--run-as 0:…)")
	case cfg.RunAs != nil && int(cfg.RunAs.UID) == euid:
		w = append(w, "jobs run with the stage's own uid (--run-as)")
	case cfg.RunAs == nil && !cfg.UseBwrap:
		w = append(w, "jobs run with the stage's own uid (no --run-as and no jail user namespace)")
	}
	return w
}

// openings are what the configuration deliberately opens on top of the jail
// (asked for by name, so not refused), logged at WARN next to weaknesses.
func openings(cfg Config) []string {
	if cfg.AllowNetwork {
		return []string{"the job shares the host's network (--allow-network): services on 127.0.0.1 are reachable"}
	}
	return nil
}

// LogContainment says which containment is in use, what it guarantees and
// where memory is enforced, so a weak fallback is visible. The sandbox stage
// calls it once its start-up checks passed, so a failed start stays one line.
func (j *Jail) LogContainment() {
	requested := j.requested
	var memory []string
	l := j.cfg.Limits
	if l.MemoryBytes != 0 && j.contain.memoryCgroup() {
		memory = append(memory, fmt.Sprintf("cgroup limit %d bytes for the whole job", l.MemoryBytes))
	}
	if as := l.rlimits(j.contain.memoryCgroup()).AddressSpaceBytes; as != 0 {
		what := "as configured"
		if l.AddressSpaceBytes == 0 {
			what = "last-resort fallback for MemoryBytes: bounds address space, not memory used"
		}
		memory = append(memory, fmt.Sprintf("RLIMIT_AS %d bytes per process (%s)", as, what))
	}
	if len(memory) == 0 {
		memory = append(memory, "unlimited")
	}
	level, jail := slog.LevelInfo, "off"
	weakOrOpen := append(slices.Clone(j.weak), openings(j.cfg)...)
	if len(weakOrOpen) > 0 {
		level = slog.LevelWarn
	}
	if j.cfg.UseBwrap {
		jail = fmt.Sprintf("bwrap: user namespace (no nested ones), no capabilities, own PID namespace and /proc, network %s, %d-byte private tmpfs job dir, /tmp, /dev/shm", map[bool]string{true: "shared", false: "none"}[j.cfg.AllowNetwork], j.cfg.JobDirBytes)
	}
	filter := "off"
	if j.seccomp != nil {
		filter = j.seccomp.String()
	}
	uid := "user namespace of the stage's uid"
	if j.cfg.RunAs != nil {
		uid = fmt.Sprintf("%d:%d", j.cfg.RunAs.UID, j.cfg.RunAs.GID)
	}
	weak := "none"
	if len(weakOrOpen) > 0 {
		weak = strings.Join(weakOrOpen, "; ")
	}
	j.cfg.Logger.Log(context.Background(), level, "sandbox: containment",
		"containment", j.contain.kind.String(), "requested", requested.String(),
		"detail", j.contain.detail, "jail", jail, "seccomp", filter, "job_uid", uid, "weak", weak, "memory", strings.Join(memory, "; "),
		"guarantees", j.contain.kind.guarantees())
}
