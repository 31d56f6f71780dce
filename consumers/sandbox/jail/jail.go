// Package jail runs one untrusted program contained, and is all of the
// sandbox stage that touches the host: the Containment that holds a job's
// processes, the rlimits, the bubblewrap jail, the job's uid, the reaper of orphaned jail inits, and the
// start-up checks that refuse a configuration weaker than the jail
// (ErrWeakContainment) or one the host cannot give. What runs, how its
// output is scored and how it becomes a record is the stage's
// (consumers/sandbox); it hands this package a directory, files, a command
// line and an environment, and gets an Outcome back.
//
// The isolation choices (bubblewrap, the job's uid and budgets, rlimits through prlimit(1),
// the Containment, seccomp, descriptors) and what each falls back to are docs/security.md's
// "Running the sandbox safely"; the code starts at New, jailArgs and prlimitPrefix.
package jail

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Errors returned by New; callers (the CLI) can branch on them to print
// installation hints.
var (
	ErrConfig         = errors.New("sandbox: invalid command executor configuration")
	ErrPrlimitMissing = errors.New("sandbox: rlimits requested but prlimit(1) (util-linux) is not installed")
	ErrBwrapMissing   = errors.New("sandbox: bubblewrap requested but bwrap is not installed (Debian package bubblewrap)")
	ErrBwrapUnusable  = errors.New("sandbox: bubblewrap is installed but cannot create a sandbox here")
	ErrUnsupported    = errors.New("sandbox: command executor is only supported on Linux")
)

// Defaults applied by New to zero fields.
const (
	// DefaultPath is a job's PATH unless the stage sets one.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
	// DefaultJobDirBytes is the size of each of the jail's private tmpfs
	// (the job directory, /tmp, /dev/shm): the job's disk quota.
	DefaultJobDirBytes = 512 << 20
	// DefaultKillGrace bounds the draining of output pipes after a kill.
	DefaultKillGrace = 200 * time.Millisecond
)

// Limits bound the child. Zero means "inherit" (no limit). The rlimits are
// applied by prlimit(1) before the untrusted program is exec'd, see
// rlimit_linux.go for why; MemoryBytes and Processes are also cgroup limits
// under ContainmentCgroup.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU. The soft limit delivers SIGXCPU, the hard
	// limit (one second later) SIGKILL. Outcome.CPULimitHit reports it.
	CPUSeconds uint64
	// MemoryBytes bounds the memory of the whole job (all its processes).
	// Under ContainmentCgroup it is the cgroup's memory limit, swap
	// included; the kernel OOM-kills past it (Outcome.OOMKills). Under any
	// other containment it falls back to RLIMIT_AS per process (unless
	// AddressSpaceBytes is set), which bounds reserved address space rather
	// than memory used and stops programs that reserve much (Go with -race,
	// JVMs) from starting at all.
	MemoryBytes uint64
	// AddressSpaceBytes is RLIMIT_AS, applied as given under any
	// containment: allocations past it fail (ENOMEM), so a memory hog
	// typically exits non-zero or aborts.
	AddressSpaceBytes uint64
	// Processes bounds the job's processes (threads included). Where the
	// job has a pids cgroup it is that cgroup's pids.max, and a fork refused
	// there is reported (Outcome.Refused). Otherwise it is RLIMIT_NPROC,
	// which the kernel does not enforce for root and counts per real uid —
	// per user namespace since Linux 5.14, which is why the jail applies it
	// inside its user namespace: each job then has a count of its own. Without
	// the jail it is per uid, shared by every slot unless RunAsRange gives
	// each slot a uid.
	Processes uint64
	// FileSizeBytes is RLIMIT_FSIZE: writing past it delivers SIGXFSZ.
	FileSizeBytes uint64
}

// rlimits are the limits prlimit(1) applies: MemoryBytes becomes RLIMIT_AS
// when no memory cgroup enforces it, and Processes is left to the pids cgroup
// where there is one (a per-job limit whose refusals are counted, unlike
// RLIMIT_NPROC's).
func (l Limits) rlimits(memoryCgroup, pidsCgroup bool) Limits {
	if !memoryCgroup && l.AddressSpaceBytes == 0 {
		l.AddressSpaceBytes = l.MemoryBytes
	}
	if pidsCgroup {
		l.Processes = 0
	}
	l.MemoryBytes = 0
	return l
}

func (l Limits) any() bool {
	return l.CPUSeconds != 0 || l.AddressSpaceBytes != 0 || l.Processes != 0 || l.FileSizeBytes != 0 || l.MemoryBytes != 0
}

// DefaultLimits are conservative limits for one rollout: generous enough for
// a small training run, tight enough that a runaway child cannot take the
// host down.
func DefaultLimits() Limits {
	return Limits{
		CPUSeconds:    600,
		MemoryBytes:   4 << 30,
		Processes:     256,
		FileSizeBytes: 1 << 30,
	}
}

// Config configures a Jail.
type Config struct {
	// Limits bound the child (zero = inherit).
	Limits Limits
	// Containment is how the job's processes are held together and its
	// memory bounded (default ContainmentAuto: the strongest available,
	// logged at start-up). Naming one that is unavailable fails New with
	// ErrContainmentUnavailable.
	Containment Containment
	// RunAs runs the child under that UID/GID (requires root); the job
	// directory is chowned to it. nil means DefaultRunAs when the stage
	// runs as root; a non-root stage's jobs get a user namespace of their
	// own in the jail instead. The stage's own uid (or 0) is weak.
	RunAs *RunAs
	// RunAsRange runs slot i's jobs as uid and gid First+i instead of RunAs
	// (requires root; exclusive with RunAs), so that RLIMIT_NPROC is each
	// slot's own where no pids cgroup per job bounds it (Job.Slot names the
	// slot; the pool must have at most Size slots).
	RunAsRange *UIDRange
	// UseBwrap runs the child in the jail (bubblewrap, see jailArgs): a
	// user namespace without capabilities, its own PID namespace and /proc,
	// no network unless AllowNetwork, a read-only minimal view of the host
	// and size-limited private tmpfs as the only writable places. Without
	// it New refuses unless AllowWeakContainment is set.
	UseBwrap bool
	// NoSeccomp turns off the system-call filter every jailed job gets
	// (seccomp_linux.go: Docker's default profile plus io_uring, the
	// keyrings, namespaces, bpf, perf_event_open and userfaultfd denied, the
	// native ABI only). The filter is on by default (the zero value) and
	// needs UseBwrap, which installs it; off, or not installable here, it is
	// a weakness (ErrWeakContainment).
	NoSeccomp bool
	// AllowNetwork keeps the host's network in the jail (default: only a
	// private loopback, so nothing on the host's 127.0.0.1 is reachable).
	// Asked for by name, it is not refused, but logged at WARN.
	AllowNetwork bool
	// AllowWeakContainment lets the jail start without bubblewrap, or
	// with jobs under the stage's own uid or as root. Each such weakness is
	// named in the start-up log; without this flag it is a start-up error
	// (ErrWeakContainment) — never a silent downgrade.
	AllowWeakContainment bool
	// JobDirBytes is the size of each private tmpfs of the jail (job
	// directory, /tmp, /dev/shm; default DefaultJobDirBytes). tmpfs pages
	// are memory: under a memory cgroup they count towards MemoryBytes.
	JobDirBytes uint64
	// Proc is the /proc of the jail (default ProcPrivate). ProcNone is for
	// a stage whose own /proc has masked paths, as every container's has
	// unless its pod asks for procMount: Unmasked (which Pod Security
	// baseline forbids): the kernel then refuses a new proc mount.
	Proc ProcMode
	// ReadOnlyPaths are extra host paths the jailed job sees read-only
	// (data, a virtualenv). The directory of every absolute argv element
	// is added automatically.
	ReadOnlyPaths []string
	// BwrapPath and PrlimitPath override the looked-up helper binaries.
	BwrapPath   string
	PrlimitPath string
	// TempDir is where job directories are created (default os.TempDir()).
	TempDir string
	// KillGrace bounds how long output pipes are drained after the process
	// group was killed (default DefaultKillGrace).
	KillGrace time.Duration
	// Logger receives the containment summary (default slog.Default()).
	Logger *slog.Logger
	// CgroupV1Only makes containment detection ignore the cgroup2 mount.
	// Only tests set it, to run the cgroup v1 paths on a host with both.
	CgroupV1Only bool
}

// ProcMode is what the jail mounts at /proc.
type ProcMode string

const (
	// ProcPrivate mounts a fresh /proc of the job's own PID namespace: the
	// job sees its own processes only.
	ProcPrivate ProcMode = "private"
	// ProcNone leaves /proc out of the jail: the job sees no process at all,
	// and programs that read /proc (ps, /proc/self/fd, /proc/cpuinfo) fail.
	ProcNone ProcMode = "none"
)

// ErrUnknownProcMode is returned by ParseProcMode.
var ErrUnknownProcMode = errors.New("sandbox: unknown jail /proc mode")

// ParseProcMode parses "private" (or "") and "none".
func ParseProcMode(s string) (ProcMode, error) {
	switch m := ProcMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", ProcPrivate:
		return ProcPrivate, nil
	case ProcNone:
		return m, nil
	}
	return "", fmt.Errorf("%w %q: want private or none", ErrUnknownProcMode, s)
}

// Jail runs programs contained as its Config says. It is safe for
// concurrent use; every Run gets its own process group and containment cell.
type Jail struct {
	cfg     Config
	contain *containment
	prefix  []string // prlimit wrapper, nil if no limits
	// requested is the containment asked for (ContainmentAuto unless named).
	requested Containment
	// weak lists what makes this configuration weaker than the jail (empty
	// when it is not); it is logged at start-up.
	weak     []string
	readOnly []string
	// seccomp is the filter every job gets (nil: none); seccompErr says
	// why it could not be installed (when NoSeccomp is not set).
	seccomp    *seccompFilter
	seccompErr error
	// usernsOpen is set when bwrap cannot pass --disable-userns here: it
	// writes /proc/sys/user/max_user_namespaces inside the job's user
	// namespace, which a read-only /proc/sys (a pod's masked /proc) refuses.
	// The seccomp filter still denies nested namespaces (unshare, setns,
	// clone with CLONE_NEW*); without it, this is a weakness.
	usernsOpen bool
}

// New applies defaults and checks that the requested isolation is actually
// available (bwrap is probed with a real run), so misconfiguration fails at
// startup rather than on the first rollout. argv is the command jobs will
// run (placeholders unexpanded): the directories of its absolute paths
// become read-only in the jail and must be reachable by the job's uid.
func New(cfg Config, argv []string) (*Jail, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	j := &Jail{cfg: cfg, requested: cfg.Containment}
	// Nothing the stage inherited reaches a job: descriptors its launcher
	// left open without close-on-exec would pass through every exec.
	if err := closeInheritedOnExec(); err != nil {
		return nil, err
	}
	if j.contain, err = detectContainment(cfg.Containment, cfg.CgroupV1Only); err != nil {
		return nil, err
	}
	j.cfg.Containment = j.contain.kind
	if rl := cfg.Limits.rlimits(j.contain.memoryCgroup(), j.contain.pidsCgroup()); rl.any() {
		if j.prefix, err = prlimitPrefix(cfg.PrlimitPath, rl); err != nil {
			return nil, err
		}
	}
	if cfg.UseBwrap {
		if err := j.prepareBwrap(argv); err != nil {
			return nil, err
		}
	}
	// Checked last, so that a plain configuration error is reported as such.
	j.weak = weaknesses(j.cfg, j.seccompErr)
	if j.usernsOpen && j.seccomp == nil {
		j.weak = append(j.weak, "nested user namespaces allowed: bwrap cannot apply --disable-userns here (read-only /proc/sys) and there is no seccomp filter to deny them")
	}
	if len(j.weak) > 0 && !cfg.AllowWeakContainment {
		return nil, fmt.Errorf("%w: %s; refusing to start (set --allow-weak-containment to run anyway)", ErrWeakContainment, strings.Join(j.weak, "; "))
	}
	return j, nil
}

// withDefaults checks cfg's own settings and fills in the defaults: a job of a root stage runs
// as DefaultRunAs unless --run-as or --run-as-range says otherwise.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.KillGrace < 0 {
		return cfg, fmt.Errorf("%w: negative kill grace", ErrConfig)
	}
	cfg.KillGrace = cmp.Or(cfg.KillGrace, DefaultKillGrace)
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.JobDirBytes = cmp.Or(cfg.JobDirBytes, DefaultJobDirBytes)
	if cfg.RunAsRange != nil {
		switch err := cfg.RunAsRange.check(); {
		case err != nil:
			return cfg, err
		case cfg.RunAs != nil:
			return cfg, fmt.Errorf("%w: --run-as and --run-as-range both given", ErrConfig)
		case os.Geteuid() != 0:
			return cfg, fmt.Errorf("%w %s: running jobs as other uids needs a root stage", ErrRunAsRange, cfg.RunAsRange)
		}
	}
	var err error
	if cfg.Proc, err = ParseProcMode(string(cfg.Proc)); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.RunAs == nil && cfg.RunAsRange == nil && os.Geteuid() == 0 {
		ra := DefaultRunAs
		cfg.RunAs = &ra
	}
	return cfg, nil
}

// prepareBwrap finds bwrap, fixes the jail's read-only paths (the directories of argv's and
// the prlimit prefix's absolute paths among them) and checks that the job's uids reach them,
// builds the seccomp filter and probes bwrap with a real run. A filter bwrap cannot install
// leaves the jail without it, recorded as a weakness rather than a failure.
func (j *Jail) prepareBwrap(argv []string) error {
	cfg := j.cfg
	var err error
	if j.cfg.BwrapPath, err = findBwrap(cfg.BwrapPath); err != nil {
		return err
	}
	reapJailOrphans() // reaper_linux.go: each job leaves an orphaned jail init
	// prlimit runs inside the jail (see command), so its binary is bound too.
	inJail := append(slices.Clone(argv), j.prefix...)
	j.readOnly = jailReadOnlyPaths(cfg.ReadOnlyPaths, inJail)
	if err := j.checkReachable(append(slices.Clone(j.readOnly), absArgs(inJail)...)); err != nil {
		return err
	}
	if !cfg.NoSeccomp {
		j.seccomp, j.seccompErr = buildSeccomp()
	}
	err = j.probeBwrapPatiently()
	if err != nil && strings.Contains(err.Error(), "max_user_namespaces") {
		j.usernsOpen = true
		err = j.probeBwrapPatiently()
	}
	if err == nil {
		return nil
	}
	if j.seccomp == nil || errors.Is(err, errProbeEAGAIN) {
		return err
	}
	// Is it the filter bwrap cannot install? Then the jail without
	// it is a weakness, not a failure.
	filter := j.seccomp
	j.seccomp = nil
	if err2 := j.probeBwrapPatiently(); err2 != nil {
		return err
	}
	j.seccompErr = fmt.Errorf("bwrap could not install the filter (sha256:%s): %w", filter.digest(), err)
	return nil
}

// checkReachable checks paths for every uid a job may run as.
func (j *Jail) checkReachable(paths []string) error {
	r := j.cfg.RunAsRange
	if r == nil {
		return checkReachable(paths, j.cfg.RunAs)
	}
	for slot := range r.Size() {
		ra, _ := r.uid(slot)
		if err := checkReachable(paths, ra); err != nil {
			return err
		}
	}
	return nil
}

// runAs is the identity of slot's jobs (nil: the stage's uid, in the jail's user namespace).
func (j *Jail) runAs(slot int) (*RunAs, error) {
	if j.cfg.RunAsRange != nil {
		return j.cfg.RunAsRange.uid(slot)
	}
	return j.cfg.RunAs, nil
}

// MaxSlots is the most pool slots the jail can give a uid of their own
// (RunAsRange's size), 0 when any number can share RunAs.
func (j *Jail) MaxSlots() int {
	if j.cfg.RunAsRange == nil {
		return 0
	}
	return j.cfg.RunAsRange.Size()
}

// command is the job's whole command line. In the jail the prlimit wrapper
// runs inside bubblewrap, once the job's user namespace exists: the kernel
// (since Linux 5.14) counts RLIMIT_NPROC per user namespace and uid, so the
// job's process limit is its own count there. Put in front of bwrap, as it
// once was, the limit was checked against every process of the uid on the
// host, and a fork bomb in one slot made the other slots' forks fail.
func (j *Jail) command(dir string, files []File, argv []string) []string {
	if !j.cfg.UseBwrap {
		return append(slices.Clone(j.prefix), argv...)
	}
	return append(append(jailArgs(j.jailSpec(dir, files)), j.prefix...), argv...)
}

// Config returns the effective configuration (defaults applied, the
// detected containment in Containment).
func (j *Jail) Config() Config { return j.cfg }

// ReadOnlyPaths are the extra host paths a job sees read-only in the jail
// (Config.ReadOnlyPaths and the directories of absolute argv paths; none
// without UseBwrap, where the job sees the host).
func (j *Jail) ReadOnlyPaths() []string { return slices.Clone(j.readOnly) }

// KillScope names what a timeout kills, for a result's reason.
func (j *Jail) KillScope() string { return j.contain.killScope() }

// File is a file the job finds in its directory. Name is relative to it
// and may name subdirectories, which are created.
type File struct {
	Name string
	Data []byte
	Mode os.FileMode
}

// Job is one run of a program in the jail.
type Job struct {
	// Dir is the job's host directory, made and removed by the caller.
	Dir string
	// Files are written into Dir (and, in the jail, copied into the job's
	// own tmpfs at the same path).
	Files []File
	// Argv and Env are the program's command line and whole environment,
	// placeholders expanded; the jail's wrappers are put in front of Argv.
	Argv []string
	Env  []string
	// Timeout is the wall-clock budget; on expiry every process of the job
	// the containment can reach is SIGKILLed.
	Timeout time.Duration
	// StdoutMax and StderrMax are the bytes of each stream kept (the tail).
	StdoutMax, StderrMax int
	// Slot is the pool slot the job runs in, which picks its uid under
	// Config.RunAsRange.
	Slot int
}

// Run runs job contained and always returns its Outcome.
func (j *Jail) Run(ctx context.Context, job Job) Outcome {
	setupFailed := func(err error) Outcome { return Outcome{SetupErr: err, ExitCode: -1} }
	ra, err := j.runAs(job.Slot)
	if err != nil {
		return setupFailed(err)
	}
	if err := j.prepareDir(job.Dir, job.Files, ra); err != nil {
		return setupFailed(err)
	}
	var fds []*os.File
	if j.cfg.UseBwrap {
		if fds, err = j.jailFiles(job.Dir, job.Files); err != nil {
			return setupFailed(err)
		}
		defer closeAll(fds)
	}
	cell, err := j.contain.newCell(j.cfg.Limits)
	if err != nil {
		return setupFailed(err)
	}
	o := runProcess(ctx, runSpec{
		cell:      cell,
		files:     fds,
		argv:      j.command(job.Dir, job.Files, job.Argv),
		dir:       j.startDir(job.Dir),
		env:       job.Env,
		runAs:     ra,
		timeout:   job.Timeout,
		stdoutMax: job.StdoutMax,
		stderrMax: job.StderrMax,
		grace:     j.cfg.KillGrace,
	})
	if !o.Signaled && j.cfg.UseBwrap {
		// bwrap reports a signal death of its child as exit 128+n.
		o.Signal, o.Signaled = bwrapSignal(o.ExitCode)
	}
	o.CPULimitHit = o.Signaled && j.cpuLimitHit(o.Signal, o.CPU)
	o.Refused = j.refused(o)
	return o
}

// refused says how the host refused the job a resource, from what the host
// side can see: forks refused at the job's pids cgroup limit, or bubblewrap
// failing to create the jail for want of a process (EAGAIN: the job uid at
// its RLIMIT_NPROC on the host). A fork refused by RLIMIT_NPROC inside the
// job leaves no trace outside it, so without a pids cgroup it is not seen.
func (j *Jail) refused(o Outcome) string {
	if o.PidsRefused > 0 {
		return fmt.Sprintf("process limit: the kernel refused %d fork(s) at the job's pids limit of %d", o.PidsRefused, j.cfg.Limits.Processes)
	}
	if j.cfg.UseBwrap && !o.Signaled && o.ExitCode == 1 {
		// bwrap's own errors come before the job runs, as its only output.
		first, _, _ := strings.Cut(string(o.Stderr), "\n")
		if strings.HasPrefix(first, "bwrap: ") && strings.Contains(strings.ToLower(first), syscall.EAGAIN.Error()) {
			return "the jail could not be created for want of a process: " + first
		}
	}
	return ""
}

// cpuLimitHit attributes a signal death to RLIMIT_CPU: SIGXCPU is only sent
// by that limit, and a SIGKILL counts when the CPU time used reached it.
func (j *Jail) cpuLimitHit(sig syscall.Signal, cpu time.Duration) bool {
	lim := j.cfg.Limits.CPUSeconds
	if lim == 0 {
		return false
	}
	return sig == sigXCPU || (sig == sigKill && cpu >= time.Duration(lim)*time.Second-50*time.Millisecond)
}
