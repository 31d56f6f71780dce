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
	case cfg.RunAs == nil && cfg.RunAsRange == nil && !cfg.UseBwrap:
		w = append(w, "jobs run with the stage's own uid (no --run-as and no jail user namespace)")
	}
	return w
}

// budgets says where each job's process and memory budget comes from, and
// lists as shared what one job can take from the jobs in other slots. A
// shared budget is logged with the weaknesses but does not stop the stage:
// a non-root stage without delegated cgroups has no per-job memory limit to
// give, and that is a set-up the jail supports.
func (j *Jail) budgets() (procs, memory string, shared []string) {
	l := j.cfg.Limits
	switch {
	case l.Processes == 0:
		procs = "unlimited"
		shared = append(shared, "no process limit (--max-procs 0): a fork bomb in one slot takes the host's processes from every other slot")
	case j.contain.pidsCgroup():
		procs = fmt.Sprintf("pids cgroup per job, %d processes", l.Processes)
	case j.cfg.UseBwrap && perUserNSNproc():
		procs = fmt.Sprintf("RLIMIT_NPROC %d counted in each job's own user namespace", l.Processes)
	case j.cfg.RunAsRange != nil:
		procs = fmt.Sprintf("RLIMIT_NPROC %d per slot uid (--run-as-range %s)", l.Processes, j.cfg.RunAsRange)
	default:
		procs = fmt.Sprintf("RLIMIT_NPROC %d of one uid shared by every slot", l.Processes)
		shared = append(shared, "slots share one process budget (RLIMIT_NPROC of one uid, no pids cgroup): a fork bomb in one slot makes the other slots' forks fail (give each slot a uid with --run-as-range, or run where a pids cgroup per job is available)")
	}
	if l.Processes != 0 && !j.contain.pidsCgroup() {
		shared = append(shared, "no pids cgroup per job: a fork refused at RLIMIT_NPROC leaves no trace outside the job, so a job starved by its process limit is graded by what it prints instead of recorded as an error")
	}
	switch {
	case l.MemoryBytes == 0:
		memory = "unlimited"
	case j.contain.memoryCgroup():
		memory = "memory cgroup per job"
	default:
		memory = "RLIMIT_AS per process only"
		shared = append(shared, "slots share the host's memory (no memory cgroup per job, RLIMIT_AS bounds each process, not the job): run as root or in a delegated cgroup for a per-job limit")
	}
	return procs, memory, shared
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
	if as := l.rlimits(j.contain.memoryCgroup(), j.contain.pidsCgroup()).AddressSpaceBytes; as != 0 {
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
	procs, _, shared := j.budgets()
	weakOrOpen := append(append(slices.Clone(j.weak), shared...), openings(j.cfg)...)
	if w := j.contain.kind.weakness(); w != "" { // else weak=none at INFO beside a WEAK guarantees line
		weakOrOpen = append(weakOrOpen, "containment "+j.contain.kind.String()+": "+w)
	}
	if len(weakOrOpen) > 0 {
		level = slog.LevelWarn
	}
	if j.cfg.UseBwrap {
		proc := map[ProcMode]string{ProcPrivate: "own PID namespace and /proc", ProcNone: "own PID namespace, no /proc"}[j.cfg.Proc]
		nested := "no nested ones: --disable-userns and the filter"
		switch {
		case j.usernsOpen && j.seccomp == nil:
			nested = "nested ones allowed: --disable-userns needs a writable /proc/sys and there is no filter"
		case j.usernsOpen:
			nested = "no nested ones: the filter only, --disable-userns needs a writable /proc/sys"
		case j.seccomp == nil:
			nested = "no nested ones: --disable-userns"
		}
		jail = fmt.Sprintf("bwrap: user namespace (%s), no capabilities, %s, network %s, %d-byte private tmpfs job dir, /tmp, /dev/shm", nested, proc, map[bool]string{true: "shared", false: "none"}[j.cfg.AllowNetwork], j.cfg.JobDirBytes)
	}
	filter := "off"
	if j.seccomp != nil {
		filter = j.seccomp.String()
	}
	uid := "user namespace of the stage's uid"
	switch {
	case j.cfg.RunAsRange != nil:
		uid = "one per slot, uid=gid in " + j.cfg.RunAsRange.String()
	case j.cfg.RunAs != nil:
		uid = fmt.Sprintf("%d:%d", j.cfg.RunAs.UID, j.cfg.RunAs.GID)
	}
	weak := "none"
	if len(weakOrOpen) > 0 {
		weak = strings.Join(weakOrOpen, "; ")
	}
	j.cfg.Logger.Log(context.Background(), level, "sandbox: containment",
		"containment", j.contain.kind.String(), "requested", requested.String(),
		"detail", j.contain.detail, "jail", jail, "seccomp", filter, "job_uid", uid, "weak", weak, "memory", strings.Join(memory, "; "), "processes", procs,
		"guarantees", j.contain.kind.guarantees())
}
