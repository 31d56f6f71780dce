package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	DefaultTimeout      = 600 * time.Second // the sandbox cap of the authors' public code
	DefaultGradeTimeout = 60 * time.Second
	DefaultStderrTail   = 4 << 10
	DefaultStdoutLimit  = 64 << 10
	// DefaultRunOutputLimit bounds what the run step hands the grade step
	// (its stdout tail, exit status and output directory, as one stream).
	DefaultRunOutputLimit = 8 << 20
	defaultArtifact       = "artifact"
)

// Placeholders expanded in CommandConfig.Argv elements and Env values.
const (
	PlaceholderArtifact = "{artifact}" // absolute path of the written artifact (run step only)
	PlaceholderDir      = "{dir}"      // absolute path of the step's private directory
)

// The run step's output directory and what the grade step finds in its own
// directory: RunOutDir is {dir}/out of the run step, where a harness writes
// what it wants graded; the grade step gets it as {dir}/run/out, next to the
// run command's stdout (its last StdoutLimit bytes) and exit status (the
// shell's $?: 128+n for a signal), all read-only copies. RunErrorFile is
// written only when the run step's outputs could not all be read (too
// large, tampered with): it says what was dropped.
const (
	RunOutDir        = "out"
	GradeRunDir      = "run"
	GradeStdoutFile  = "run/stdout"
	GradeExitFile    = "run/exit_status"
	GradeOutDir      = "run/out"
	GradeErrorFile   = "run/error"
	runCollectorDir  = ".wmrl-run"
	maxRunOutputFile = 1024 // files of the output directory handed to the grade step
)

// DefaultCommandConfig is the configuration `wmrl sandbox` starts from (its
// flags' defaults) without the commands: the jail on, DefaultLimits, the
// default timeouts and job-directory size, RunAs left to jail.DefaultRunAs.
// The hostile-job suite's "default" column runs exactly this.
func DefaultCommandConfig() CommandConfig {
	return CommandConfig{
		Timeout:      DefaultTimeout,
		GradeTimeout: DefaultGradeTimeout,
		Config:       jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true, JobDirBytes: jail.DefaultJobDirBytes},
	}
}

// CommandConfig configures a CommandExecutor.
//
// With GradeArgv set a rollout is executed in two steps, each in its own
// jail and job directory: the run step executes Argv with only the
// solution's input (the artifact, the InputMeta keys, RunReadOnlyPaths),
// and the grade step executes GradeArgv with the run step's outputs
// (read-only copies under {dir}/run) and the private data ({dir}/rollout.json
// with every meta key, GradeReadOnlyPaths) and prints the score. The code
// being graded never runs where the score is printed and never sees the
// answer. Without GradeArgv the executor is the single-step mode: Argv runs
// once and its own stdout is the score, so it suits only commands that do
// not execute the artifact as code or read anything private; no rollout.json
// is written and only InputMeta keys expand.
type CommandConfig struct {
	// Argv is the run step's command (or the single step's), without a
	// shell. Elements may contain {artifact}, {dir} and {meta.KEY} for
	// InputMeta keys. Argv[0] is resolved with the parent's PATH at
	// construction unless it contains a placeholder.
	Argv []string
	// GradeArgv is the grade step's command: {dir} and any {meta.KEY}, no
	// {artifact} (the grade step gets no artifact file; rollout.json may
	// carry an inline one as data). Empty selects the single-step mode.
	GradeArgv []string
	// InputMeta names the meta keys the run step may see ({meta.KEY});
	// every other key is private and reaches only the grade step.
	InputMeta []string
	// RunReadOnlyPaths and GradeReadOnlyPaths are host paths bound
	// read-only into one step only: public task data (per-case inputs, a
	// harness) and private task data (tests, expected outputs). The
	// embedded Config.ReadOnlyPaths are bound into both (a virtualenv);
	// the directories of absolute Argv paths go to the run step, those of
	// GradeArgv to the grade step. A run step that would see a grade
	// step's path (the same directory or one above it) is refused
	// (ErrPrivateData).
	RunReadOnlyPaths, GradeReadOnlyPaths []string
	// Timeout is the wall-clock budget of the run step (the single step)
	// per job (default 600 s); on expiry every process of the step the
	// containment can reach is SIGKILLed and the job reports StatusTimeout.
	Timeout time.Duration
	// GradeTimeout is the grade step's budget (default 60 s); a grader
	// that overruns it is an error of the task, never a timeout of the
	// rollout.
	GradeTimeout time.Duration
	// EnvAllow names parent environment variables copied into the run
	// step (the single step); nothing else from the parent leaks through.
	EnvAllow []string
	// Env are fixed variables of the run step (values may contain its
	// placeholders); they win over EnvAllow. PATH defaults to
	// jail.DefaultPath, HOME and TMPDIR to {dir}, in both steps.
	Env map[string]string
	// GradeEnv are fixed variables of the grade step.
	GradeEnv map[string]string
	// ScoreMin and ScoreMax bound valid scores (both zero = [0, 1]).
	ScoreMin, ScoreMax float64
	// StderrTail and StdoutLimit are the bytes of stderr kept for the
	// result (per step) and of stdout kept for score parsing and for the
	// grade step's copy of the run step's stdout (the tail is kept).
	StderrTail  int
	StdoutLimit int
	// RunOutputLimit bounds the run step's outputs as handed to the grade
	// step (default DefaultRunOutputLimit); past it they are unreadable and
	// the grade step gets RunErrorFile instead.
	RunOutputLimit int
	// Config is the jail every step runs in: containment, limits,
	// bubblewrap, the job's uid (defaults applied by jail.New).
	jail.Config
}

// CommandExecutor runs each job as one or two jailed programs. It is safe
// for concurrent use; every call gets its own directories, process groups
// and containment cells.
type CommandExecutor struct {
	cfg   CommandConfig
	rng   scoreRange
	run   *step // the run step, or the single step
	grade *step // nil in the single-step mode
	input map[string]bool
}

// step is one jailed program of a job.
type step struct {
	name string // "run step", "grade step", "" for the single step
	jail *jail.Jail
	argv []string // argv[0] resolved; placeholders unexpanded
	// env are the step's fixed variables, placeholders unexpanded; fixed
	// the EnvAllow values, read once at construction (the stage may scrub
	// its own environment later).
	env     map[string]string
	fixed   map[string]string
	timeout time.Duration
}

// runCollector runs the run step's command inside its jail and streams
// what the grade step gets to stdout as a tar archive: the jail's tmpfs
// vanishes with it, so this is the only way out. It runs next to the
// solution under the same uid, so what it reports is the run step's say-so,
// untrusted like everything the grade step reads under run/.
// $1 job dir, $2 stdout bytes kept, $3 mkdir, $4 tail, $5 tar, then the command.
const runCollector = `cd "$1" || exit 125
n=$2 mkdir=$3 tail=$4 tar=$5
shift 5
"$mkdir" -m 0700 ` + RunOutDir + ` ` + runCollectorDir + ` || exit 125
"$@" </dev/null >` + runCollectorDir + `/stdout.all
echo $? >` + runCollectorDir + `/exit
"$tail" -c "$n" ` + runCollectorDir + `/stdout.all >` + runCollectorDir + `/stdout
exec "$tar" -c -f - ` + runCollectorDir + `/stdout ` + runCollectorDir + `/exit ` + RunOutDir

// NewCommandExecutor validates cfg, applies defaults and checks that the
// requested isolation is actually available (bwrap is probed with a real run
// per step), so misconfiguration fails at startup rather than on the first
// rollout.
func NewCommandExecutor(cfg CommandConfig) (*CommandExecutor, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, fmt.Errorf("%w: empty argv", ErrConfig)
	}
	twoStep := len(cfg.GradeArgv) > 0
	if twoStep && cfg.GradeArgv[0] == "" {
		return nil, fmt.Errorf("%w: empty grade argv", ErrConfig)
	}
	if !twoStep && (len(cfg.GradeEnv) > 0 || len(cfg.GradeReadOnlyPaths) > 0) {
		return nil, fmt.Errorf("%w: grade-step settings without a grade command (GradeArgv)", ErrConfig)
	}
	if cfg.Timeout < 0 || cfg.GradeTimeout < 0 || cfg.StderrTail < 0 || cfg.StdoutLimit < 0 || cfg.RunOutputLimit < 0 || cfg.KillGrace < 0 {
		return nil, fmt.Errorf("%w: negative timeout or size", ErrConfig)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.GradeTimeout = cmp.Or(cfg.GradeTimeout, DefaultGradeTimeout)
	cfg.StderrTail = cmp.Or(cfg.StderrTail, DefaultStderrTail)
	cfg.StdoutLimit = cmp.Or(cfg.StdoutLimit, DefaultStdoutLimit)
	cfg.RunOutputLimit = cmp.Or(cfg.RunOutputLimit, DefaultRunOutputLimit)
	e := &CommandExecutor{cfg: cfg, input: map[string]bool{}}
	for _, k := range cfg.InputMeta {
		if k == "" {
			return nil, fmt.Errorf("%w: empty input meta key", ErrConfig)
		}
		e.input[k] = true
	}
	var err error
	if e.rng, err = newScoreRange(cfg.ScoreMin, cfg.ScoreMax); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	runName := ""
	if twoStep {
		runName = "run step"
	}
	if err := e.checkPlaceholders("--argv", "--env", cfg.Argv, cfg.Env, true); err != nil {
		return nil, err
	}
	if err := e.checkPlaceholders("--grade-argv", "--grade-env", cfg.GradeArgv, cfg.GradeEnv, false); err != nil {
		return nil, err
	}
	fixed, err := allowedEnv(cfg.EnvAllow)
	if err != nil {
		return nil, err
	}
	run := cfg.Config
	run.ReadOnlyPaths = slices.Concat(cfg.ReadOnlyPaths, cfg.RunReadOnlyPaths)
	collect := 0 // the stdout bytes runCollector keeps; 0: no collector
	if twoStep {
		collect = cfg.StdoutLimit
	}
	if e.run, err = newStep(runName, run, cfg.Argv, cfg.Env, fixed, cfg.Timeout, collect); err != nil {
		return nil, err
	}
	if twoStep {
		grade := cfg.Config
		grade.ReadOnlyPaths = slices.Concat(cfg.ReadOnlyPaths, cfg.GradeReadOnlyPaths)
		if e.grade, err = newStep("grade step", grade, cfg.GradeArgv, cfg.GradeEnv, nil, cfg.GradeTimeout, 0); err != nil {
			return nil, err
		}
		if err := privateApart(e.run.jail.ReadOnlyPaths(), append(argvDirs(e.grade.argv), cfg.GradeReadOnlyPaths...)); err != nil {
			return nil, err
		}
	}
	e.cfg.Config = e.run.jail.Config()
	e.cfg.ReadOnlyPaths = cfg.ReadOnlyPaths
	return e, nil
}

// privateApart refuses a run step that would see the grade step's private
// paths: one of the run step's read-only paths (the shared ones included)
// is such a path or a directory above it — a task whose harness and grader
// share a directory, a --ro-bind of the task root.
func privateApart(run, private []string) error {
	canon := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	for _, g := range private {
		g := canon(g)
		for _, r := range run {
			r := canon(r)
			if g == r || strings.HasPrefix(g, strings.TrimSuffix(r, "/")+"/") {
				return fmt.Errorf("%w: %w: the run step sees %s (read-only), which holds the grade step's private %s; keep a task's public and private files in separate directories (--run-ro-bind, --grade-ro-bind, and the directories of absolute --argv and --grade-argv paths; --ro-bind is both steps')", ErrConfig, ErrPrivateData, r, g)
			}
		}
	}
	return nil
}

// argvDirs are the directories of the files an argv names by absolute path
// (placeholders aside): the jail binds them into that step.
func argvDirs(argv []string) []string {
	var dirs []string
	for _, a := range argv {
		if !filepath.IsAbs(a) || strings.Contains(a, "{") {
			continue
		}
		if st, err := os.Stat(a); err == nil && !st.IsDir() {
			dirs = append(dirs, filepath.Dir(a))
		}
	}
	return dirs
}

// checkPlaceholders rejects malformed placeholders and, for the run step,
// a {meta.KEY} that InputMeta does not name: that would hand the code being
// graded a label. {artifact} is the run step's only.
func (e *CommandExecutor) checkPlaceholders(argvFlag, envFlag string, argv []string, env map[string]string, run bool) error {
	check := func(where, s string) error {
		if err := checkMetaPlaceholders(where, s); err != nil {
			return err
		}
		if !run && strings.Contains(s, PlaceholderArtifact) {
			return fmt.Errorf("%w: %s %q: the grade step gets the run step's outputs, never the artifact itself (%s)", ErrConfig, where, s, PlaceholderArtifact)
		}
		for _, k := range metaKeys(s) {
			if run && !e.input[k] {
				return fmt.Errorf("%w: %w: %s %q names {meta.%s}, which is private (every meta key is, unless --input-meta %s marks it as the solution's input)", ErrConfig, ErrPrivateData, where, s, k, k)
			}
		}
		return nil
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: bad environment variable name %q", ErrConfig, k)
		}
		if err := check(envFlag+" "+k, v); err != nil {
			return err
		}
	}
	for _, a := range argv {
		if err := check(argvFlag, a); err != nil {
			return err
		}
	}
	return nil
}

// newStep resolves argv[0] and builds the step's jail. With collect > 0 (the
// run step of two) the command is wrapped in runCollector, which keeps that
// many bytes of its stdout; its helpers are resolved here too.
func newStep(name string, cfg jail.Config, argv []string, env, fixed map[string]string, timeout time.Duration, collect int) (*step, error) {
	s := &step{name: name, argv: slices.Clone(argv), env: env, fixed: fixed, timeout: timeout}
	if !strings.Contains(s.argv[0], "{") {
		p, err := exec.LookPath(s.argv[0])
		if err != nil {
			return nil, fmt.Errorf("%w: command %q: %w", ErrConfig, s.argv[0], err)
		}
		if s.argv[0], err = filepath.Abs(p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if collect > 0 {
		prefix := []string{"sh", "-c", runCollector, "wmrl-run", PlaceholderDir, strconv.Itoa(collect), "mkdir", "tail", "tar"}
		for _, i := range []int{0, 6, 7, 8} {
			p, err := exec.LookPath(prefix[i])
			if err != nil {
				return nil, fmt.Errorf("%w: the run step's collector needs %s: %w", ErrConfig, prefix[i], err)
			}
			prefix[i] = p
		}
		s.argv = append(prefix, s.argv...)
	}
	var err error
	if s.jail, err = jail.New(cfg, s.argv); err != nil {
		if name != "" {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, err
	}
	return s, nil
}

// LogContainment says which containment is in use, what it guarantees and
// where it is weak (jail.Jail.LogContainment), and what each step sees; the
// stage calls it once its start-up checks passed.
func (e *CommandExecutor) LogContainment() {
	e.run.jail.LogContainment()
	if e.grade == nil {
		e.cfg.Logger.Warn("sandbox: single step: the command's own stdout is the score and no private data reaches it (no rollout.json, only --input-meta keys); anything it executes can print its own score",
			"input_meta", e.cfg.InputMeta)
		return
	}
	e.cfg.Logger.Info("sandbox: two steps per rollout, each in its own jail",
		"run_sees", fmt.Sprintf("the artifact, meta keys %v, read-only %v", e.cfg.InputMeta, e.run.jail.ReadOnlyPaths()),
		"grade_sees", fmt.Sprintf("the run step's stdout, exit status and %s/ (read-only), %s with every meta key, read-only %v", RunOutDir, RolloutFile, e.grade.jail.ReadOnlyPaths()))
}

// Config returns the effective configuration (defaults applied).
func (e *CommandExecutor) Config() CommandConfig { return e.cfg }

// MaxSlots is the most pool slots the executor serves (jail.Jail.MaxSlots;
// 0: any number): both steps of a slot run as that slot's uid. NewPool checks it.
func (e *CommandExecutor) MaxSlots() int { return e.run.jail.MaxSlots() }

// Execute runs job and always returns a Result; the job directories are
// removed and the process groups killed before it returns.
func (e *CommandExecutor) Execute(ctx context.Context, job Job) Result {
	name, err := artifactName(job.ArtifactName)
	if err == nil && (name == RunOutDir || name == runCollectorDir) {
		err = fmt.Errorf("sandbox: artifact name %q is taken by the run step's outputs", name)
	}
	if err != nil {
		return Result{Status: StatusInvalid, Reason: err.Error(), ExitCode: -1}
	}
	if e.grade == nil {
		o, res := e.runStep(ctx, job, name)
		if res != nil {
			return *res
		}
		return e.classify(e.run, o)
	}
	o, res := e.runStep(ctx, job, name)
	if res != nil {
		return *res
	}
	// A run step ended by the budgets (wall clock, memory), by the host or
	// by shutdown is not graded; one that crashed or exited non-zero is:
	// the grader judges what came back.
	if r, stopped := e.failure(e.run, o); stopped {
		r.Reason = e.run.name + ": " + r.Reason
		return r
	}
	files, problems := runOutputs(o.Stdout)
	if len(problems) > 0 {
		files = append(files, jail.File{Name: GradeErrorFile, Data: []byte(strings.Join(problems, "\n") + "\n"), Mode: 0o444})
	}
	if job.Rollout != nil {
		files = append(files, jail.File{Name: RolloutFile, Data: job.Rollout, Mode: 0o400})
	}
	g, res := e.gradeStep(ctx, job, files)
	if res != nil {
		return *res
	}
	r := e.classify(e.grade, g)
	if r.Status == StatusTimeout {
		r.Status = StatusError // the grader's budget, not the rollout's
	}
	if r.Status != StatusOK {
		r.Reason = e.grade.name + ": " + r.Reason
	}
	r.Duration = o.Duration + g.Duration
	r.StderrTail = stepTails(validUTF8(o.Stderr), validUTF8(g.Stderr))
	return r
}

// stepTails is a two-step job's stderr: the run step's tail, then the grade
// step's (the informative end survives a cut from the front).
func stepTails(run, grade string) string {
	if grade == "" {
		return run
	}
	return run + "\n--- grade step stderr ---\n" + grade
}

// jobDir makes a step's host directory; remove deletes it.
func (e *CommandExecutor) jobDir() (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp(e.cfg.TempDir, "wmrl-sandbox-")
	if err != nil {
		return "", nil, fmt.Errorf("sandbox: create job dir: %w", err)
	}
	return dir, func() {
		if err := os.RemoveAll(dir); err != nil {
			e.cfg.Logger.Warn("sandbox: remove job dir", "dir", dir, "err", err)
		}
	}, nil
}

// runStep runs the run step (or the single step) with the artifact and the
// public meta. A non-nil Result is the job's outcome (nothing ran).
func (e *CommandExecutor) runStep(ctx context.Context, job Job, name string) (jail.Outcome, *Result) {
	dir, remove, err := e.jobDir()
	if err != nil {
		return jail.Outcome{}, &Result{Status: StatusError, Reason: err.Error(), ExitCode: -1}
	}
	defer remove()
	ph := placeholders{dir: dir, artifact: filepath.Join(dir, name), meta: publicMeta(job.Meta, e.input), rollout: job.RolloutID}
	stdoutMax := e.cfg.StdoutLimit
	if e.grade != nil {
		stdoutMax = e.cfg.RunOutputLimit
	}
	return e.exec(ctx, e.run, ph, job, []jail.File{{Name: name, Data: job.Artifact, Mode: 0o700}}, stdoutMax)
}

// gradeStep runs the grade step with the private data and the run step's
// outputs.
func (e *CommandExecutor) gradeStep(ctx context.Context, job Job, files []jail.File) (jail.Outcome, *Result) {
	dir, remove, err := e.jobDir()
	if err != nil {
		return jail.Outcome{}, &Result{Status: StatusError, Reason: e.grade.name + ": " + err.Error(), ExitCode: -1}
	}
	defer remove()
	ph := placeholders{dir: dir, meta: job.Meta, rollout: job.RolloutID}
	return e.exec(ctx, e.grade, ph, job, files, e.cfg.StdoutLimit)
}

// exec expands the step's command line and environment and runs it.
func (e *CommandExecutor) exec(ctx context.Context, s *step, ph placeholders, job Job, files []jail.File, stdoutMax int) (jail.Outcome, *Result) {
	fail := func(err error) (jail.Outcome, *Result) {
		reason := err.Error()
		if s.name != "" {
			reason = s.name + ": " + reason
		}
		return jail.Outcome{}, &Result{Status: StatusError, Reason: reason, ExitCode: -1}
	}
	argv := make([]string, 0, len(s.argv))
	for _, a := range s.argv {
		x, err := ph.expand(a)
		if err != nil {
			return fail(err)
		}
		argv = append(argv, x)
	}
	env, err := environ(ph, s.fixed, s.env)
	if err != nil {
		return fail(err)
	}
	out := s.jail.Run(ctx, jail.Job{Dir: ph.dir, Files: files, Argv: argv, Env: env,
		Timeout: s.timeout, StdoutMax: stdoutMax, StderrMax: e.cfg.StderrTail, Slot: job.Slot})
	if out.CellErr != nil {
		e.cfg.Logger.Warn("sandbox: containment cleanup", "rollout", job.RolloutID, "step", s.name, "err", out.CellErr)
	}
	return out, nil
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

// environ is a step's whole environment: PATH, HOME and TMPDIR, the
// EnvAllow values read at start-up (run step) and its fixed variables.
// Nothing else of the stage's.
func environ(ph placeholders, fixed, vars map[string]string) ([]string, error) {
	env := map[string]string{"PATH": jail.DefaultPath, "HOME": ph.dir, "TMPDIR": ph.dir}
	maps.Copy(env, fixed)
	for k, v := range vars {
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
