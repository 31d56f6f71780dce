package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

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
	runAsRange, jailProc                                           string
	argv                                                           []string
	env                                                            map[string]string
	cfg                                                            sandbox.CommandConfig
	slots, handlers                                                int
	stage                                                          stageFlags
	seccomp                                                        bool
}

func newSandboxCmd(a *app) *cobra.Command {
	o := &sandboxOptions{a: a}
	base := sandbox.DefaultCommandConfig()
	defaults := base.Limits
	cmd := &cobra.Command{
		Use: "sandbox",
		Example: `  wmrl sandbox --argv '["/opt/task/run", "{artifact}"]' --slots 8 --timeout 600s
  wmrl sandbox --argv '["python3", "score.py", "{artifact}"]' --bwrap --memory 2GiB --max-failure-share 0.2`,
		Short: "Execute anchor rollouts in a pool of exclusive slots into rewards.executed",
		Long: `Consume the rollouts topic; non-anchor rollouts are skipped (consumed and committed, no output);
every anchor rollout gets exactly one executed-reward record. Each job runs --argv (no shell; {artifact}
is the path of the rollout's artifact file, {dir} its private directory) in the jail (--bwrap, on by
default: bubblewrap with a user namespace and no capabilities, its own PID namespace and /proc (none
with --jail-proc=none), no network unless --allow-network, a read-only minimal view of the host, and size-limited private tmpfs
for {dir}, /tmp and /dev/shm), as an unprivileged uid (a root stage's jobs run as 65534 unless
--run-as says otherwise), contained per --containment with rlimits (via prlimit) and a wall-clock
--timeout that kills the whole job, under a seccomp filter (--seccomp, on by default). Anything weaker
(--bwrap=false, --seccomp=false, --run-as with the stage's uid or root) is refused at start-up unless --allow-weak-containment is given; --allow-network is logged. The program
reports on stdout: its last non-empty line must be a JSON object {"score": <number in [0,1]>}; the
job finds the rollout record (its task: meta, prompt) in {dir}/rollout.json, and {meta.KEY} in
--argv/--env is the rollout's meta value (a missing key fails the job with status error); the
tail of its stderr goes into the executed record as stderr_tail, which is untrusted output.

--on-timeout=missing (default) records status timeout without a score, so the rollout is excluded
from its group; --on-timeout=zero reproduces the reference: status stays timeout, imputed: true,
score 0. The built-in task's executor runs in 'wmrl demo'.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", "command", "executor: command (an external program)")
	f.StringArrayVar(&o.argv, "argv", nil, `command to run: repeat per argument (--argv python3 --argv {artifact}) or one JSON array (--argv '["python3","{artifact}"]'); placeholders {artifact}, {dir} ({dir}/rollout.json is the rollout record) and {meta.KEY} (the rollout's meta; a missing key fails the job with status error)`)
	f.StringSliceVar(&cfg.EnvAllow, "env-allow", nil, "parent environment variables passed to the program (nothing else leaks)")
	f.StringToStringVar(&o.env, "env", nil, "fixed environment variables KEY=VALUE (values may use {dir}, {artifact}, {meta.KEY})")
	f.DurationVar(&cfg.Timeout, "timeout", base.Timeout, "wall-clock budget per rollout; the process group is killed on expiry")
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
	f.StringArrayVar(&cfg.ReadOnlyPaths, "ro-bind", nil, "extra host path the jailed job sees read-only (repeat); the directories of absolute --argv paths are added automatically")
	f.StringVar(&cfg.TempDir, "temp-dir", "", "where job directories are created (default $TMPDIR)")
	f.IntVar(&o.slots, "slots", 4, "exclusive execution slots (concurrent jobs)")
	f.IntVar(&o.handlers, "handlers", 0, "stage handlers (0: 2×slots, so a slot never waits for a produce acknowledgement)")
	f.StringVar(&o.onTimeout, "on-timeout", "missing", "reward of a timed-out rollout: missing (excluded) or zero (the reference)")
	f.StringVar(&o.artifactName, "artifact-name", "", "file name of the artifact in the job directory (default artifact), e.g. solution.py")
	o.stage.add(f, sandbox.StageName, "9465", "time running jobs get to finish on shutdown before they are killed and handed back")
	return cmd
}

func (o *sandboxOptions) run(cmd *cobra.Command, _ []string) error {
	a, cfg := o.a, o.cfg
	if o.backend == "builtin" {
		return errors.New("--backend builtin is the demo's task executor: run it with `wmrl demo`")
	}
	if o.backend != "command" {
		return fmt.Errorf("--backend %q: want command", o.backend)
	}
	var err error
	if cfg.Argv, err = parseArgv(o.argv); err != nil {
		return err
	}
	cfg.NoSeccomp = !o.seccomp
	if cfg.Limits.MemoryBytes, err = parseBytes(o.memory); err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	if cfg.Containment, err = jail.ParseContainment(o.containment); err != nil {
		return fmt.Errorf("--containment: %w", err)
	}
	if cfg.Proc, err = jail.ParseProcMode(o.jailProc); err != nil {
		return fmt.Errorf("--jail-proc: %w", err)
	}
	if cfg.Limits.AddressSpaceBytes, err = parseBytes(o.addressSpace); err != nil {
		return fmt.Errorf("--address-space: %w", err)
	}
	if cfg.Limits.FileSizeBytes, err = parseBytes(o.fileSize); err != nil {
		return fmt.Errorf("--file-size: %w", err)
	}
	if cfg.JobDirBytes, err = parseBytes(o.jobDirSize); err != nil {
		return fmt.Errorf("--job-dir-size: %w", err)
	}
	if cfg.JobDirBytes == 0 {
		return errors.New("--job-dir-size: want a size above 0 (it is the job's disk quota)")
	}
	if o.runAs != "" {
		if cfg.RunAs, err = parseRunAs(o.runAs); err != nil {
			return err
		}
	}
	if o.runAsRange != "" {
		r, err := jail.ParseUIDRange(o.runAsRange)
		if err != nil {
			return err
		}
		if r.Size() < o.slots {
			return fmt.Errorf("--run-as-range %s: %d uids for --slots %d (one uid per slot)", r, r.Size(), o.slots)
		}
		cfg.RunAsRange = &r
	}
	cfg.Env = o.env
	cfg.Logger = a.log
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

// parseArgv accepts --argv repeated per argument, or a single JSON array of strings.
func parseArgv(args []string) ([]string, error) {
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "[") {
		var out []string
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, fmt.Errorf("--argv: not a JSON array of strings: %w", err)
		}
		args = out
	}
	if len(args) == 0 || args[0] == "" {
		return nil, errors.New("--argv is required: the sandbox command, e.g. --argv python3 --argv {artifact}")
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
