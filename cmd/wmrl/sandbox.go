package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
)

func init() { register(newSandboxCmd) }

// sandboxOptions holds sandbox's flags; its run method is the command's body.
type sandboxOptions struct {
	a                                                              *app
	backend, artifactName, onTimeout                               string
	addressSpace, memory, fileSize, runAs, containment, jobDirSize string
	runAsRange, jailProc, runOutputSize                            string
	argv, gradeArgv                                                []string
	env, gradeEnv                                                  map[string]string
	singleStep                                                     bool
	cfg                                                            sandbox.CommandConfig
	slots, handlers                                                int
	stage                                                          stageFlags
	seccomp                                                        bool
}

func newSandboxCmd(a *app) *cobra.Command { return (&sandboxOptions{a: a}).command() }

// command is the cobra command with its flags bound to o.
func (o *sandboxOptions) command() *cobra.Command {
	base := sandbox.DefaultCommandConfig()
	cmd := &cobra.Command{
		Use: "sandbox",
		Example: `  wmrl sandbox --argv /bin/cat --argv {artifact} --grade-argv '["/usr/bin/python3", "-I", "/opt/task/math/grade.py", "{dir}"]'
  wmrl sandbox --input-meta task --argv '["/usr/bin/python3", "-I", "/opt/task/public/harness.py", "{artifact}", "/opt/task/public/{meta.task}/cases", "{dir}/out"]' --grade-argv '["/usr/bin/python3", "-I", "/opt/task/private/grade.py", "{dir}/run", "/opt/task/private/{meta.task}"]' --artifact-name solution.py
  wmrl sandbox --single-step-no-private --argv '["/opt/task/score", "{artifact}"]' --slots 8 --timeout 600s`,
		Short: "Execute anchor rollouts in a pool of exclusive slots into rewards.executed",
		Long: `Consume the rollouts topic; non-anchor rollouts are skipped (consumed and committed, no output);
every anchor rollout gets exactly one executed-reward record, from two steps, each in its own jail
(docs/stages.md, "Point wmrl sandbox at a real sandbox command"):

  run step    --argv, no shell: {artifact} is the rollout's artifact, {dir} the step's private
              directory; {meta.KEY} only for keys named by --input-meta (the solution's input).
              Whatever it writes to {dir}/out, its stdout and its exit status are its outputs.
              It never sees rollout.json or any other meta key (labels, ground truth), nor
              --grade-ro-bind paths.
  grade step  --grade-argv: {dir}/rollout.json is the rollout record with every meta key,
              {dir}/run/stdout, {dir}/run/exit_status and {dir}/run/out/ the run step's outputs
              (read-only copies, data only: never execute or import them), {meta.KEY} any key.
              Its last non-empty stdout line must be {"score": <number in [0,1]>}.

A run step ended by --timeout is status timeout and one killed for memory status error, neither
graded; one that crashed or exited non-zero is graded on what came back. A grade step that fails is
status error (the task is broken, not the rollout). --single-step-no-private instead runs --argv
alone and takes its own stdout as the score: only for a command that executes nothing it is
graded on and reads nothing private (no rollout.json, only --input-meta keys).

Every step runs in the jail (--bwrap, on by default: bubblewrap with a user namespace and no
capabilities, its own PID namespace and /proc (none with --jail-proc=none), no network unless --allow-network, a read-only
minimal view of the host, and size-limited private tmpfs for {dir}, /tmp and /dev/shm), as an
unprivileged uid (a root stage's jobs run as 65534 unless --run-as says otherwise), contained per
--containment with rlimits (via prlimit), under a seccomp filter (--seccomp, on by default). Anything
weaker (--bwrap=false, --seccomp=false, --run-as with the stage's uid or root) is refused at start-up unless --allow-weak-containment is given; --allow-network is
logged. stderr_tail holds the tails of both steps' stderr: untrusted output.

--on-timeout=missing (default) records status timeout without a score, so the rollout is excluded
from its group; --on-timeout=zero reproduces the reference: status stays timeout, imputed: true,
score 0. The built-in task's executor runs in 'wmrl demo'.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", "command", "executor: command (an external program)")
	f.StringArrayVar(&o.argv, "argv", nil, `the run step's command: repeat per argument (--argv python3 --argv {artifact}) or one JSON array (--argv '["python3","{artifact}"]'); placeholders {artifact}, {dir} (write outputs to {dir}/out) and {meta.KEY} for --input-meta keys (a missing key fails the job with status error)`)
	f.StringArrayVar(&o.gradeArgv, "grade-argv", nil, `the grade step's command, like --argv; {dir}/rollout.json is the rollout record (every meta key), {dir}/run/{stdout,exit_status,out/} the run step's outputs; {meta.KEY} any key; no {artifact}`)
	f.BoolVar(&o.singleStep, "single-step-no-private", false, "run --argv alone and take its own stdout as the score: no grade step, no rollout.json, no private meta key; only for a command that executes nothing it is graded on")
	f.StringArrayVar(&cfg.InputMeta, "input-meta", nil, "meta key the run step may see as {meta.KEY}: the solution's input (repeat); every other key (labels, ground truth, the trainer adapters' task fields) is private")
	f.StringArrayVar(&cfg.RunReadOnlyPaths, "run-ro-bind", nil, "host path only the run step sees read-only: public task data such as per-case inputs and a harness (repeat); the directories of absolute --argv paths are added")
	f.StringArrayVar(&cfg.GradeReadOnlyPaths, "grade-ro-bind", nil, "host path only the grade step sees read-only: private task data such as tests and expected outputs (repeat); the directories of absolute --grade-argv paths are added")
	f.StringSliceVar(&cfg.EnvAllow, "env-allow", nil, "parent environment variables passed to the run step (nothing else leaks)")
	f.StringToStringVar(&o.env, "env", nil, "fixed environment variables KEY=VALUE of the run step (values may use {dir}, {artifact}, {meta.KEY} of --input-meta keys)")
	f.StringToStringVar(&o.gradeEnv, "grade-env", nil, "fixed environment variables KEY=VALUE of the grade step (values may use {dir}, {meta.KEY})")
	f.DurationVar(&cfg.Timeout, "timeout", base.Timeout, "wall-clock budget of the run step per rollout; the step is killed on expiry and the rollout is status timeout")
	f.DurationVar(&cfg.GradeTimeout, "grade-timeout", base.GradeTimeout, "wall-clock budget of the grade step; overrunning it is status error (the task's fault, not the rollout's)")
	f.StringVar(&o.runOutputSize, "run-output-size", strconv.Itoa(sandbox.DefaultRunOutputLimit>>20)+"MiB", "most the run step hands the grade step (its stdout tail, exit status and {dir}/out, as one stream); past it the grade step gets {dir}/run/error instead")
	o.containmentFlags(f, base)
	f.StringArrayVar(&cfg.ReadOnlyPaths, "ro-bind", nil, "host path both steps see read-only, e.g. a virtualenv (repeat): never private data, which is --grade-ro-bind's")
	f.StringVar(&cfg.TempDir, "temp-dir", "", "where job directories are created (default $TMPDIR)")
	f.IntVar(&o.slots, "slots", 4, "exclusive execution slots (concurrent jobs)")
	f.IntVar(&o.handlers, "handlers", 0, "stage handlers (0: 2×slots, so a slot never waits for a produce acknowledgement)")
	f.StringVar(&o.onTimeout, "on-timeout", "missing", "reward of a timed-out rollout: missing (excluded) or zero (the reference)")
	f.StringVar(&o.artifactName, "artifact-name", "", "file name of the artifact in the job directory (default artifact), e.g. solution.py")
	o.stage.add(f, sandbox.StageName, "9465", "time running jobs get to finish on shutdown before they are killed and handed back")
	return cmd
}

// containmentFlags adds the flags of the jail, the job's uid and its resource limits to f,
// with defaults from base.
func (o *sandboxOptions) containmentFlags(f *pflag.FlagSet, base sandbox.CommandConfig) {
	cfg, defaults := &o.cfg, base.Limits
	f.Uint64Var(&cfg.Limits.CPUSeconds, "cpu-seconds", defaults.CPUSeconds, "RLIMIT_CPU per process (0: inherit); exceeding it is a timeout")
	f.StringVar(&o.memory, "memory", "4GiB", "memory of the whole job: a cgroup limit (OOM kill reported as such) under --containment cgroup, else RLIMIT_AS per process (0: none)")
	f.StringVar(&o.addressSpace, "address-space", "0", "RLIMIT_AS per process on top of --memory, e.g. 4GiB (0: none; breaks programs that reserve address space)")
	f.StringVar(&o.containment, "containment", "auto", "how a job's processes are held together: cgroup, pidns, pgroup, or auto (the strongest available; naming one that is unavailable is a start-up error)")
	f.Uint64Var(&cfg.Limits.Processes, "max-procs", defaults.Processes, "processes (threads included) of one job: its pids cgroup limit where it has one, else RLIMIT_NPROC, counted in the job's own user namespace in the jail (Linux 5.14+) and per uid without it")
	f.StringVar(&o.fileSize, "file-size", "1GiB", "RLIMIT_FSIZE, largest file the program may write (0: inherit)")
	f.BoolVar(&cfg.UseBwrap, "bwrap", base.UseBwrap, "run each job in the jail (bubblewrap: user namespace, no capabilities, own PID namespace and /proc, no network, read-only minimal root, private size-limited tmpfs); --bwrap=false needs --allow-weak-containment")
	f.StringVar(&o.jailProc, "jail-proc", string(jail.ProcPrivate), "the jail's /proc: private (a fresh /proc of the job's PID namespace) or none (no /proc; for a pod with procMount: Default, whose masked /proc the kernel refuses to mount again)")
	f.BoolVar(&o.seccomp, "seccomp", true, "install the jail's system-call filter on every job (Docker's default profile plus io_uring, the keyrings, namespaces, bpf, perf_event_open and userfaultfd denied; the native ABI only); --seccomp=false needs --allow-weak-containment")
	f.StringVar(&o.runAs, "run-as", "", "run the program as UID:GID (requires root; default for a root stage: 65534:65534)")
	f.StringVar(&o.runAsRange, "run-as-range", "", "run slot i's jobs as uid=gid FIRST+i, e.g. 100000-100063 (requires root, at least --slots uids, none of them 0, 65534 or the stage's): each slot's RLIMIT_NPROC is its own where no pids cgroup per job holds the budget")
	f.BoolVar(&cfg.AllowNetwork, "allow-network", false, "give jobs the host's network (services on 127.0.0.1 become reachable; logged at WARN)")
	f.BoolVar(&cfg.AllowWeakContainment, "allow-weak-containment", false, "start even if the containment is weaker than the jail (no bwrap, jobs as the stage's uid or root); the weaknesses are logged")
	f.StringVar(&o.jobDirSize, "job-dir-size", strconv.FormatUint(base.JobDirBytes>>20, 10)+"MiB", "size of each private tmpfs of the jail (the job directory, /tmp, /dev/shm): the job's disk quota, counted as memory")
}

func (o *sandboxOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	if o.backend == "builtin" {
		return errors.New("--backend builtin is the demo's task executor: run it with `wmrl demo`")
	}
	if o.backend != "command" {
		return fmt.Errorf("--backend %q: want command", o.backend)
	}
	cfg, err := o.commandConfig()
	if err != nil {
		return err
	}
	policy, err := sandbox.ParsePolicy(o.onTimeout)
	if err != nil {
		return fmt.Errorf("--on-timeout: %w", err)
	}
	exec, err := sandbox.NewCommandExecutor(cfg)
	if err != nil {
		return err
	}
	pool, err := sandbox.NewPool(exec, o.slots, sandbox.WithLogger(a.log))
	if err != nil {
		return err
	}
	return o.stage.run(a, cmd, sandbox.StageName, func(member stage.Config, artifacts artifact.Resolver) (stageRunner, error) {
		member.Concurrency = o.handlers
		return sandbox.NewStage(member, sandbox.HandlerConfig{Pool: pool, Policy: policy, ArtifactName: o.artifactName, Artifacts: artifacts})
	})
}

// commandConfig is the executor's configuration from the flags.
func (o *sandboxOptions) commandConfig() (sandbox.CommandConfig, error) {
	cfg := o.cfg
	var err error
	if cfg.Argv, err = parseArgv("--argv", o.argv); err != nil {
		return cfg, err
	}
	if slices.Equal(o.gradeArgv, []string{""}) {
		o.gradeArgv = nil // an empty WMRL_GRADE_ARGV (docker-compose.yml's default) is unset
	}
	switch {
	case len(o.gradeArgv) > 0 && o.singleStep:
		return cfg, errors.New("--grade-argv and --single-step-no-private exclude each other: with a grade step the run step's stdout is not the score")
	case len(o.gradeArgv) > 0:
		if cfg.GradeArgv, err = parseArgv("--grade-argv", o.gradeArgv); err != nil {
			return cfg, err
		}
	case !o.singleStep:
		return cfg, errors.New("--grade-argv is required: the grade step scores the run step's outputs against the private data (rollout.json, --grade-ro-bind); --single-step-no-private runs --argv alone instead, for a command whose own stdout may be the score because it executes nothing it is graded on and reads nothing private")
	case len(o.gradeEnv) > 0 || len(cfg.GradeReadOnlyPaths) > 0:
		return cfg, errors.New("--grade-env and --grade-ro-bind need --grade-argv (there is no grade step with --single-step-no-private)")
	}
	if cfg.RunOutputLimit, err = parseInt("--run-output-size", o.runOutputSize); err != nil {
		return cfg, err
	}
	if cfg.Limits.MemoryBytes, err = parseBytes(o.memory); err != nil {
		return cfg, fmt.Errorf("--memory: %w", err)
	}
	if cfg.Containment, err = jail.ParseContainment(o.containment); err != nil {
		return cfg, fmt.Errorf("--containment: %w", err)
	}
	if cfg.Limits.AddressSpaceBytes, err = parseBytes(o.addressSpace); err != nil {
		return cfg, fmt.Errorf("--address-space: %w", err)
	}
	if cfg.Limits.FileSizeBytes, err = parseBytes(o.fileSize); err != nil {
		return cfg, fmt.Errorf("--file-size: %w", err)
	}
	if cfg.JobDirBytes, err = parseBytes(o.jobDirSize); err != nil {
		return cfg, fmt.Errorf("--job-dir-size: %w", err)
	}
	if cfg.JobDirBytes == 0 {
		return cfg, errors.New("--job-dir-size: want a size above 0 (it is the job's disk quota)")
	}
	if o.runAs != "" {
		if cfg.RunAs, err = parseRunAs(o.runAs); err != nil {
			return cfg, err
		}
	}
	if o.runAsRange != "" {
		r, err := jail.ParseUIDRange(o.runAsRange)
		if err != nil {
			return cfg, err
		}
		if r.Size() < o.slots {
			return cfg, fmt.Errorf("--run-as-range %s: %d uids for --slots %d (one uid per slot)", r, r.Size(), o.slots)
		}
		cfg.RunAsRange = &r
	}
	if cfg.Proc, err = jail.ParseProcMode(o.jailProc); err != nil {
		return cfg, fmt.Errorf("--jail-proc: %w", err)
	}
	cfg.NoSeccomp = !o.seccomp
	cfg.Env, cfg.GradeEnv = o.env, o.gradeEnv
	cfg.Logger = o.a.log
	return cfg, nil
}

// parseInt reads a byte size that must fit an int and be above 0.
func parseInt(flag, s string) (int, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flag, err)
	}
	if n == 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("%s %s: want a size above 0 and below 2GiB", flag, s)
	}
	return int(n), nil
}

// parseArgv accepts a command flag repeated per argument, or a single JSON array of strings.
func parseArgv(flag string, args []string) ([]string, error) {
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "[") {
		var out []string
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, fmt.Errorf("%s: not a JSON array of strings: %w", flag, err)
		}
		args = out
	}
	if len(args) == 0 || args[0] == "" {
		return nil, fmt.Errorf("%s is required: the step's command, e.g. %s python3 %s {artifact}", flag, flag, flag)
	}
	return args, nil
}

// parseBytes reads a byte size: a plain number, or one with a binary suffix (K, Ki, KiB, M, …, T;
// all powers of 1024, since rlimits are about memory and files, not disk marketing).
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a byte size (e.g. 4GiB, 512MiB, 1048576)", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "ki": 10, "kib": 10, "m": 20, "mi": 20, "mib": 20,
		"g": 30, "gi": 30, "gib": 30, "t": 40, "ti": 40, "tib": 40}
	sh, ok := shift[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (want K, M, G or T, powers of 1024)", s, unit)
	}
	b := v * float64(uint64(1)<<sh)
	if b >= math.MaxUint64 || b != math.Trunc(b) {
		return 0, fmt.Errorf("%q is not a whole number of bytes below 2^64", s)
	}
	return uint64(b), nil
}

func parseRunAs(s string) (*jail.RunAs, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--run-as %q: want UID:GID (numbers)", s)
	}
	return &jail.RunAs{UID: uint32(uid), GID: uint32(gid)}, nil
}
