package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Configuration errors returned by NewCommandExecutor; callers (the CLI) can
// branch on them to print installation hints.
var (
	ErrConfig         = errors.New("sandbox: invalid command executor configuration")
	ErrPrlimitMissing = errors.New("sandbox: rlimits requested but prlimit(1) (util-linux) is not installed")
	ErrBwrapMissing   = errors.New("sandbox: bubblewrap requested but bwrap is not installed (Debian package bubblewrap)")
	ErrBwrapUnusable  = errors.New("sandbox: bubblewrap is installed but cannot create a sandbox here")
	ErrUnsupported    = errors.New("sandbox: command executor is only supported on Linux")
)

// Defaults applied by NewCommandExecutor to zero fields.
const (
	DefaultTimeout     = 600 * time.Second // the reference sandbox cap (DESIGN §2)
	DefaultStderrTail  = 4 << 10
	DefaultStdoutLimit = 64 << 10
	DefaultPath        = "/usr/local/bin:/usr/bin:/bin"
	// DefaultJobDirBytes is the size of each of the jail's private tmpfs
	// (the job directory, /tmp, /dev/shm): the job's disk quota.
	DefaultJobDirBytes = 512 << 20
	defaultArtifact    = "artifact"
)

// Placeholders expanded in CommandConfig.Argv elements and Env values.
const (
	PlaceholderArtifact = "{artifact}" // absolute path of the written artifact
	PlaceholderDir      = "{dir}"      // absolute path of the job's private directory
)

// Limits bound the child. Zero means "inherit" (no limit). The rlimits are
// applied by prlimit(1) before the untrusted program is exec'd, see
// rlimit_linux.go for why; MemoryBytes and Processes are also cgroup limits
// under ContainmentCgroup.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU. The soft limit delivers SIGXCPU, the hard
	// limit (one second later) SIGKILL. Reported as StatusTimeout.
	CPUSeconds uint64
	// MemoryBytes bounds the memory of the whole job (all its processes).
	// Under ContainmentCgroup it is the cgroup's memory limit, swap
	// included; the kernel OOM-kills past it and the job reports StatusError
	// with an "out of memory" reason (Result.OOMKilled). Under any other
	// containment it falls back to RLIMIT_AS per process (unless
	// AddressSpaceBytes is set), which bounds reserved address space rather
	// than memory used and stops programs that reserve much (Go with -race,
	// JVMs) from starting at all.
	MemoryBytes uint64
	// AddressSpaceBytes is RLIMIT_AS, applied as given under any
	// containment: allocations past it fail (ENOMEM), so a memory hog
	// typically exits non-zero or aborts → StatusError.
	AddressSpaceBytes uint64
	// Processes is RLIMIT_NPROC, which the kernel counts per real UID and
	// does not enforce for root, so alone it only bites together with RunAs.
	// Under ContainmentCgroup it is also the job's pids limit.
	Processes uint64
	// FileSizeBytes is RLIMIT_FSIZE: writing past it delivers SIGXFSZ.
	FileSizeBytes uint64
}

// rlimits are the limits prlimit(1) applies: MemoryBytes becomes RLIMIT_AS
// when no memory cgroup enforces it.
func (l Limits) rlimits(memoryCgroup bool) Limits {
	if !memoryCgroup && l.AddressSpaceBytes == 0 {
		l.AddressSpaceBytes = l.MemoryBytes
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

// DefaultCommandConfig is the configuration `wmrl sandbox` starts from (its
// flags' defaults) without the command: the jail on, DefaultLimits, the
// default timeout and job-directory size, RunAs left to DefaultRunAs. The
// hostile-job suite's "default" column runs exactly this.
func DefaultCommandConfig() CommandConfig {
	return CommandConfig{
		Timeout:     DefaultTimeout,
		Limits:      DefaultLimits(),
		UseBwrap:    true,
		JobDirBytes: DefaultJobDirBytes,
	}
}

// RunAs is the unprivileged identity the child runs as.
type RunAs struct{ UID, GID uint32 }

// DefaultRunAs is the identity of a root stage's jobs when RunAs is nil:
// nobody, so a job owns no file on the host and RLIMIT_NPROC binds it.
// Give the sandbox a uid of its own with RunAs where the host has one.
var DefaultRunAs = RunAs{UID: 65534, GID: 65534}

// CommandConfig configures a CommandExecutor.
type CommandConfig struct {
	// Argv is the command to run, without a shell. Elements may contain
	// {artifact} and {dir}. Argv[0] is resolved with the parent's PATH at
	// construction unless it contains a placeholder.
	Argv []string
	// Timeout is the wall-clock budget per job (default 600 s); on expiry
	// every process of the job the containment can reach is SIGKILLed and
	// the job reports StatusTimeout.
	Timeout time.Duration
	// EnvAllow names parent environment variables copied into the child;
	// nothing else from the parent leaks through.
	EnvAllow []string
	// Env are fixed variables (values may contain placeholders); they win
	// over EnvAllow. PATH defaults to DefaultPath, HOME and TMPDIR to {dir}.
	Env map[string]string
	// Limits bound the child (zero = inherit).
	Limits Limits
	// Containment is how the job's processes are held together and its
	// memory bounded (default ContainmentAuto: the strongest available,
	// logged at start-up). Naming one that is unavailable fails
	// NewCommandExecutor with ErrContainmentUnavailable.
	Containment Containment
	// RunAs runs the child under that UID/GID (requires root); the job
	// directory is chowned to it. nil means DefaultRunAs when the stage
	// runs as root; a non-root stage's jobs get a user namespace of their
	// own in the jail instead. The stage's own uid (or 0) is weak.
	RunAs *RunAs
	// UseBwrap runs the child in the jail (bubblewrap, see jailArgs): a
	// user namespace without capabilities, its own PID namespace and /proc,
	// no network unless AllowNetwork, a read-only minimal view of the host
	// and size-limited private tmpfs as the only writable places. Without
	// it the executor refuses to start unless AllowWeakContainment is set.
	UseBwrap bool
	// AllowNetwork keeps the host's network in the jail (default: only a
	// private loopback, so nothing on the host's 127.0.0.1 is reachable).
	// Asked for by name, it is not refused, but logged at WARN.
	AllowNetwork bool
	// AllowWeakContainment lets the executor start without the jail, or
	// with jobs under the stage's own uid or as root. Each such weakness is
	// named in the start-up log; without this flag it is a start-up error
	// (ErrWeakContainment) — never a silent downgrade.
	AllowWeakContainment bool
	// JobDirBytes is the size of each private tmpfs of the jail (job
	// directory, /tmp, /dev/shm; default DefaultJobDirBytes). tmpfs pages
	// are memory: under a memory cgroup they count towards MemoryBytes.
	JobDirBytes uint64
	// ReadOnlyPaths are extra host paths the jailed job sees read-only
	// (data, a virtualenv). The directory of every absolute argv element
	// is added automatically.
	ReadOnlyPaths []string
	// BwrapPath and PrlimitPath override the looked-up helper binaries.
	BwrapPath   string
	PrlimitPath string
	// TempDir is where job directories are created (default os.TempDir()).
	TempDir string
	// ScoreMin and ScoreMax bound valid scores (both zero = [0, 1]).
	ScoreMin, ScoreMax float64
	// StderrTail and StdoutLimit are the bytes of stderr kept for the
	// result and of stdout kept for score parsing (the tail is kept).
	StderrTail  int
	StdoutLimit int
	// KillGrace bounds how long output pipes are drained after the process
	// group was killed (default 200 ms).
	KillGrace time.Duration
	// Logger receives cleanup warnings (default slog.Default()).
	Logger *slog.Logger
}

// CommandExecutor runs each job as an external program. It is safe for
// concurrent use; every call gets its own directory, process group and
// containment cell.
type CommandExecutor struct {
	cfg     CommandConfig
	contain *containment
	argv    []string
	prefix  []string // prlimit wrapper, nil if no limits
	rng     scoreRange
	log     *slog.Logger
	// requested is the containment asked for (ContainmentAuto unless named).
	requested Containment
	// weak lists what makes this executor weaker than the jail (empty when
	// it is not); it is logged at start-up.
	weak []string
	// envFixed is the EnvAllow part of the job's environment, read once at
	// construction: the stage may scrub its own environment later.
	envFixed map[string]string
	readOnly []string
}

// NewCommandExecutor validates cfg, applies defaults and checks that the
// requested isolation is actually available (bwrap is probed with a real run),
// so misconfiguration fails at startup rather than on the first rollout.
func NewCommandExecutor(cfg CommandConfig) (*CommandExecutor, error) {
	if !commandSupported {
		return nil, ErrUnsupported
	}
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, fmt.Errorf("%w: empty argv", ErrConfig)
	}
	if cfg.Timeout < 0 || cfg.StderrTail < 0 || cfg.StdoutLimit < 0 || cfg.KillGrace < 0 {
		return nil, fmt.Errorf("%w: negative timeout or size", ErrConfig)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.StderrTail == 0 {
		cfg.StderrTail = DefaultStderrTail
	}
	if cfg.StdoutLimit == 0 {
		cfg.StdoutLimit = DefaultStdoutLimit
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 200 * time.Millisecond
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for k, v := range cfg.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: bad environment variable name %q", ErrConfig, k)
		}
		if err := checkMetaPlaceholders("--env "+k, v); err != nil {
			return nil, err
		}
	}
	for _, a := range cfg.Argv {
		if err := checkMetaPlaceholders("--argv", a); err != nil {
			return nil, err
		}
	}
	rng, err := newScoreRange(cfg.ScoreMin, cfg.ScoreMax)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	e := &CommandExecutor{cfg: cfg, rng: rng, log: cfg.Logger, requested: cfg.Containment}
	e.argv = slices.Clone(cfg.Argv)
	if !strings.Contains(e.argv[0], "{") {
		p, err := exec.LookPath(e.argv[0])
		if err != nil {
			return nil, fmt.Errorf("%w: command %q: %w", ErrConfig, e.argv[0], err)
		}
		if e.argv[0], err = filepath.Abs(p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if e.envFixed, err = allowedEnv(cfg.EnvAllow); err != nil {
		return nil, err
	}
	if cfg.JobDirBytes == 0 {
		e.cfg.JobDirBytes = DefaultJobDirBytes
	}
	if e.cfg.RunAs == nil && os.Geteuid() == 0 {
		ra := DefaultRunAs
		e.cfg.RunAs = &ra
	}
	if e.contain, err = detectContainment(cfg.Containment); err != nil {
		return nil, err
	}
	e.cfg.Containment = e.contain.kind
	if rl := cfg.Limits.rlimits(e.contain.memoryCgroup()); rl.any() {
		if e.prefix, err = prlimitPrefix(cfg.PrlimitPath, rl); err != nil {
			return nil, err
		}
	}
	if cfg.UseBwrap {
		if e.cfg.BwrapPath, err = findBwrap(cfg.BwrapPath); err != nil {
			return nil, err
		}
		reapJailOrphans() // reaper_linux.go: each job leaves an orphaned jail init
		e.readOnly = jailReadOnlyPaths(cfg.ReadOnlyPaths, e.argv)
		if err := checkReachable(append(slices.Clone(e.readOnly), absArgs(e.argv)...), e.cfg.RunAs); err != nil {
			return nil, err
		}
		if err := e.probeBwrap(); err != nil {
			return nil, err
		}
	}
	// Checked last, so that a plain configuration error is reported as such.
	e.weak = weaknesses(e.cfg)
	if len(e.weak) > 0 && !cfg.AllowWeakContainment {
		return nil, fmt.Errorf("%w: %s; refusing to start (set --allow-weak-containment to run anyway)", ErrWeakContainment, strings.Join(e.weak, "; "))
	}
	return e, nil
}

// LogContainment says which containment is in use, what it guarantees and
// where memory is enforced, so a weak fallback is visible. The sandbox stage
// calls it once its start-up checks passed, so a failed start stays one line.
func (e *CommandExecutor) LogContainment() {
	requested := e.requested
	var memory []string
	l := e.cfg.Limits
	if l.MemoryBytes != 0 && e.contain.memoryCgroup() {
		memory = append(memory, fmt.Sprintf("cgroup limit %d bytes for the whole job", l.MemoryBytes))
	}
	if as := l.rlimits(e.contain.memoryCgroup()).AddressSpaceBytes; as != 0 {
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
	weakOrOpen := append(slices.Clone(e.weak), openings(e.cfg)...)
	if len(weakOrOpen) > 0 {
		level = slog.LevelWarn
	}
	if e.cfg.UseBwrap {
		jail = fmt.Sprintf("bwrap: user namespace, no capabilities, own PID namespace and /proc, network %s, %d-byte private tmpfs job dir, /tmp, /dev/shm", map[bool]string{true: "shared", false: "none"}[e.cfg.AllowNetwork], e.cfg.JobDirBytes)
	}
	uid := "user namespace of the stage's uid"
	if e.cfg.RunAs != nil {
		uid = fmt.Sprintf("%d:%d", e.cfg.RunAs.UID, e.cfg.RunAs.GID)
	}
	weak := "none"
	if len(weakOrOpen) > 0 {
		weak = strings.Join(weakOrOpen, "; ")
	}
	e.log.Log(context.Background(), level, "sandbox: containment",
		"containment", e.contain.kind.String(), "requested", requested.String(),
		"detail", e.contain.detail, "jail", jail, "job_uid", uid, "weak", weak, "memory", strings.Join(memory, "; "),
		"guarantees", e.contain.kind.guarantees())
}

// Config returns the effective configuration (defaults applied).
func (e *CommandExecutor) Config() CommandConfig { return e.cfg }

// Execute runs job and always returns a Result; the job directory is removed
// and the process group killed before it returns.
func (e *CommandExecutor) Execute(ctx context.Context, job Job) Result {
	name, err := artifactName(job.ArtifactName)
	if err == nil && name == RolloutFile && job.Rollout != nil {
		err = fmt.Errorf("sandbox: artifact name %q is taken by the rollout record", name)
	}
	if err != nil {
		return Result{Status: StatusInvalid, Reason: err.Error(), ExitCode: -1}
	}
	dir, err := os.MkdirTemp(e.cfg.TempDir, "wmrl-sandbox-")
	if err != nil {
		return Result{Status: StatusError, Reason: fmt.Sprintf("sandbox: create job dir: %v", err), ExitCode: -1}
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			e.log.Warn("sandbox: remove job dir", "dir", dir, "err", err)
		}
	}()
	artifact := filepath.Join(dir, name)
	ph := placeholders{dir: dir, artifact: artifact, meta: job.Meta, rollout: job.RolloutID}
	argv, err := e.commandLine(ph, jobFiles(job, name))
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	env, err := e.environ(ph)
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	files, err := e.prepareDir(dir, jobFiles(job, name))
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	var fds []*os.File
	if e.cfg.UseBwrap {
		if fds, err = openJobFiles(dir, files); err != nil {
			return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
		}
		defer closeAll(fds)
	}
	cell, err := e.contain.newCell(e.cfg.Limits)
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	spec := runSpec{
		cell:      cell,
		files:     fds,
		argv:      argv,
		dir:       e.startDir(dir),
		env:       env,
		runAs:     e.cfg.RunAs,
		timeout:   e.cfg.Timeout,
		stdoutMax: e.cfg.StdoutLimit,
		stderrMax: e.cfg.StderrTail,
		grace:     e.cfg.KillGrace,
	}
	out := runProcess(ctx, spec)
	if out.cellErr != nil {
		e.log.Warn("sandbox: containment cleanup", "rollout", job.RolloutID, "err", out.cellErr)
	}
	return e.classify(out)
}

func artifactName(n string) (string, error) {
	if n == "" {
		return defaultArtifact, nil
	}
	if n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || len(n) > 255 {
		return "", fmt.Errorf("sandbox: artifact name %q is not a plain file name", n)
	}
	return n, nil
}

// jobFiles are what the job finds in its directory: the artifact and, when the
// caller passed it, the rollout record.
func jobFiles(job Job, artifact string) []jobFile {
	fs := []jobFile{{name: artifact, data: job.Artifact, mode: 0o700}}
	if job.Rollout != nil {
		fs = append(fs, jobFile{name: RolloutFile, data: job.Rollout, mode: 0o400})
	}
	return fs
}

// commandLine is prlimit … -- [bwrap … --] argv: limits are set outermost so
// they also bound bubblewrap's own helper processes.
func (e *CommandExecutor) commandLine(ph placeholders, files []jobFile) ([]string, error) {
	var line []string
	line = append(line, e.prefix...)
	if e.cfg.UseBwrap {
		line = append(line, jailArgs(e.jailSpec(ph.dir, files))...)
	}
	for _, a := range e.argv {
		x, err := ph.expand(a)
		if err != nil {
			return nil, err
		}
		line = append(line, x)
	}
	return line, nil
}

// environ is the job's whole environment: PATH, HOME and TMPDIR, the
// EnvAllow values read at start-up and Env. Nothing else of the stage's.
func (e *CommandExecutor) environ(ph placeholders) ([]string, error) {
	env := map[string]string{"PATH": DefaultPath, "HOME": ph.dir, "TMPDIR": ph.dir}
	for k, v := range e.envFixed {
		env[k] = v
	}
	for k, v := range e.cfg.Env {
		x, err := ph.expand(v)
		if err != nil {
			return nil, err
		}
		env[k] = x
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// classify maps a process outcome onto the four statuses.
func (e *CommandExecutor) classify(o procOutcome) Result {
	r := Result{
		Duration:   o.duration,
		ExitCode:   -1,
		StderrTail: validUTF8(o.stderr),
	}
	switch {
	case o.startErr != nil:
		r.Status, r.Reason = StatusError, fmt.Sprintf("sandbox: start: %v", o.startErr)
	case o.canceled:
		r.Status, r.Reason, r.canceled = StatusError, "canceled: "+o.cancelCause.Error(), true
	case o.oomKills > 0:
		// Checked before the timeout: a job whose worker was OOM-killed
		// often hangs waiting for it, and the memory is the real cause.
		r.Status, r.oom = StatusError, true
		r.Reason = fmt.Sprintf("out of memory: job exceeded its memory limit of %d bytes (%d process(es) OOM-killed)", e.cfg.Limits.MemoryBytes, o.oomKills)
	case o.timedOut:
		r.Status, r.Reason = StatusTimeout, fmt.Sprintf("wall-clock timeout after %s: %s killed", e.cfg.Timeout, e.contain.killScope())
	default:
		sig, signaled := o.signal, o.signaled
		if !signaled && e.cfg.UseBwrap {
			// bwrap reports a signal death of its child as exit 128+n.
			sig, signaled = bwrapSignal(o.exitCode)
		}
		switch {
		case signaled && e.cpuLimitHit(sig, o.cpu):
			r.Status, r.Reason = StatusTimeout, fmt.Sprintf("cpu time limit %ds exceeded: killed by %s", e.cfg.Limits.CPUSeconds, signalName(sig))
		case signaled:
			r.Status, r.Reason = StatusError, "killed by signal "+signalName(sig)+signalHint(sig)
			if e.cfg.UseBwrap {
				r.ExitCode = o.exitCode
			}
		case o.exitCode != 0:
			r.Status, r.ExitCode = StatusError, o.exitCode
			r.Reason = fmt.Sprintf("exit status %d", o.exitCode)
		default:
			r.ExitCode = 0
			score, err := e.rng.parse(o.stdout)
			if err != nil {
				r.Status, r.Reason = StatusInvalid, err.Error()
			} else {
				r.Status, r.Score = StatusOK, score
			}
		}
	}
	if o.pipeHeld {
		r.Reason = strings.TrimPrefix(r.Reason+"; output pipe held open by an escaped process", "; ")
	}
	return r
}

// cpuLimitHit attributes a signal death to RLIMIT_CPU: SIGXCPU is only sent
// by that limit, and a SIGKILL counts when the CPU time used reached it.
func (e *CommandExecutor) cpuLimitHit(sig signal, cpu time.Duration) bool {
	lim := e.cfg.Limits.CPUSeconds
	if lim == 0 {
		return false
	}
	return sig == sigXCPU || (sig == sigKill && cpu >= time.Duration(lim)*time.Second-50*time.Millisecond)
}
