package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// ErrConfig is returned by NewCommandExecutor (and the pool and stage
// constructors) for an unusable configuration. It is jail.ErrConfig, so one
// errors.Is covers the jail's configuration errors too; the jail's other
// start-up errors are jail's (jail.ErrBwrapMissing, …), for the CLI's hints.
var ErrConfig = jail.ErrConfig

// ErrEnvAllow is returned for an EnvAllow name the job must never get.
var ErrEnvAllow = errors.New("sandbox: --env-allow")

// Defaults applied by NewCommandExecutor to zero fields.
const (
	DefaultTimeout     = 600 * time.Second // the reference sandbox cap (DESIGN §2)
	DefaultStderrTail  = 4 << 10
	DefaultStdoutLimit = 64 << 10
	defaultArtifact    = "artifact"
)

// Placeholders expanded in CommandConfig.Argv elements and Env values.
const (
	PlaceholderArtifact = "{artifact}" // absolute path of the written artifact
	PlaceholderDir      = "{dir}"      // absolute path of the job's private directory
)

// DefaultCommandConfig is the configuration `wmrl sandbox` starts from (its
// flags' defaults) without the command: the jail on, DefaultLimits, the
// default timeout and job-directory size, RunAs left to jail.DefaultRunAs. The
// hostile-job suite's "default" column runs exactly this.
func DefaultCommandConfig() CommandConfig {
	return CommandConfig{
		Timeout: DefaultTimeout,
		Config:  jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true, JobDirBytes: jail.DefaultJobDirBytes},
	}
}

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
	// over EnvAllow. PATH defaults to jail.DefaultPath, HOME and TMPDIR to {dir}.
	Env map[string]string
	// ScoreMin and ScoreMax bound valid scores (both zero = [0, 1]).
	ScoreMin, ScoreMax float64
	// StderrTail and StdoutLimit are the bytes of stderr kept for the
	// result and of stdout kept for score parsing (the tail is kept).
	StderrTail  int
	StdoutLimit int
	// Config is the jail every job runs in: containment, limits,
	// bubblewrap, the job's uid (defaults applied by jail.New).
	jail.Config
}

// CommandExecutor runs each job as an external program. It is safe for
// concurrent use; every call gets its own directory, process group and
// containment cell.
type CommandExecutor struct {
	cfg  CommandConfig
	jail *jail.Jail
	argv []string
	rng  scoreRange
	// envFixed is the EnvAllow part of the job's environment, read once at
	// construction: the stage may scrub its own environment later.
	envFixed map[string]string
}

// NewCommandExecutor validates cfg, applies defaults and checks that the
// requested isolation is actually available (bwrap is probed with a real run),
// so misconfiguration fails at startup rather than on the first rollout.
func NewCommandExecutor(cfg CommandConfig) (*CommandExecutor, error) {
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
	e := &CommandExecutor{cfg: cfg, rng: rng}
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
	if e.jail, err = jail.New(cfg.Config, e.argv); err != nil {
		return nil, err
	}
	e.cfg.Config = e.jail.Config()
	return e, nil
}

// LogContainment says which containment is in use, what it guarantees and
// where it is weak (jail.Jail.LogContainment); the stage calls it once its
// start-up checks passed.
func (e *CommandExecutor) LogContainment() { e.jail.LogContainment() }

// Config returns the effective configuration (defaults applied).
func (e *CommandExecutor) Config() CommandConfig { return e.cfg }

// MaxSlots is the most pool slots the executor serves (jail.Jail.MaxSlots;
// 0: any number). NewPool checks it.
func (e *CommandExecutor) MaxSlots() int { return e.jail.MaxSlots() }

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
			e.cfg.Logger.Warn("sandbox: remove job dir", "dir", dir, "err", err)
		}
	}()
	artifact := filepath.Join(dir, name)
	ph := placeholders{dir: dir, artifact: artifact, meta: job.Meta, rollout: job.RolloutID}
	argv, err := e.commandLine(ph)
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	env, err := e.environ(ph)
	if err != nil {
		return Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	out := e.jail.Run(ctx, jail.Job{Dir: dir, Files: jobFiles(job, name), Argv: argv, Env: env,
		Timeout: e.cfg.Timeout, StdoutMax: e.cfg.StdoutLimit, StderrMax: e.cfg.StderrTail, Slot: job.Slot})
	if out.CellErr != nil {
		e.cfg.Logger.Warn("sandbox: containment cleanup", "rollout", job.RolloutID, "err", out.CellErr)
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
func jobFiles(job Job, artifact string) []jail.File {
	fs := []jail.File{{Name: artifact, Data: job.Artifact, Mode: 0o700}}
	if job.Rollout != nil {
		fs = append(fs, jail.File{Name: RolloutFile, Data: job.Rollout, Mode: 0o400})
	}
	return fs
}

// commandLine is the job's argv, placeholders expanded; the jail puts its
// wrappers (prlimit, bubblewrap) in front.
func (e *CommandExecutor) commandLine(ph placeholders) ([]string, error) {
	line := make([]string, 0, len(e.argv))
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
	env := map[string]string{"PATH": jail.DefaultPath, "HOME": ph.dir, "TMPDIR": ph.dir}
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

// classify maps the jail's outcome onto the four statuses.
func (e *CommandExecutor) classify(o jail.Outcome) Result {
	r := Result{
		Duration:   o.Duration,
		ExitCode:   -1,
		StderrTail: validUTF8(o.Stderr),
	}
	switch {
	case o.SetupErr != nil:
		r.Status, r.Reason = StatusError, o.SetupErr.Error()
	case o.StartErr != nil:
		r.Status, r.Reason = StatusError, fmt.Sprintf("sandbox: start: %v", o.StartErr)
	case o.Canceled:
		r.Status, r.Reason, r.canceled = StatusError, "canceled: "+o.CancelCause.Error(), true
	case o.OOMKills > 0:
		// Checked before the timeout: a job whose worker was OOM-killed
		// often hangs waiting for it, and the memory is the real cause.
		r.Status, r.oom = StatusError, true
		r.Reason = fmt.Sprintf("out of memory: job exceeded its memory limit of %d bytes (%d process(es) OOM-killed)", e.cfg.Limits.MemoryBytes, o.OOMKills)
	case o.Refused != "":
		// The host, not the rollout, decided this outcome: whatever the job
		// printed is no grade (an honest grader whose subprocesses could not
		// start reports a failing score). Before the timeout: a job that
		// cannot fork often hangs.
		r.Status, r.Reason = StatusError, "host refused a resource: "+o.Refused
	case o.TimedOut:
		r.Status, r.Reason = StatusTimeout, fmt.Sprintf("wall-clock timeout after %s: %s killed", e.cfg.Timeout, e.jail.KillScope())
	case o.CPULimitHit:
		r.Status, r.Reason = StatusTimeout, fmt.Sprintf("cpu time limit %ds exceeded: killed by %s", e.cfg.Limits.CPUSeconds, jail.SignalName(o.Signal))
	case o.Signaled:
		r.Status, r.Reason = StatusError, "killed by signal "+jail.SignalName(o.Signal)+jail.SignalHint(o.Signal)
		if e.cfg.UseBwrap {
			r.ExitCode = o.ExitCode
		}
	case o.ExitCode != 0:
		r.Status, r.ExitCode = StatusError, o.ExitCode
		r.Reason = fmt.Sprintf("exit status %d", o.ExitCode)
	default:
		r.ExitCode = 0
		score, err := e.rng.parse(o.Stdout)
		if err != nil {
			r.Status, r.Reason = StatusInvalid, err.Error()
		} else {
			r.Status, r.Score = StatusOK, score
		}
	}
	if o.PipeHeld {
		r.Reason = strings.TrimPrefix(r.Reason+"; output pipe held open by an escaped process", "; ")
	}
	return r
}

// allowedEnv reads the EnvAllow variables once. Names of wmrl's own
// settings (WMRL_*: credentials among them) are refused: the job's
// environment is explicit and never carries the stage's secrets.
func allowedEnv(names []string) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range names {
		if strings.HasPrefix(strings.ToUpper(k), "WMRL_") {
			return nil, fmt.Errorf("%w: %s is the stage's own setting (credentials live there), never passed to a job; use --env KEY=VALUE", ErrEnvAllow, k)
		}
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return env, nil
}
