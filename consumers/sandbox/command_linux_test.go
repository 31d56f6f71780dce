package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// helperExec builds a CommandExecutor running the test binary in "run" mode:
// the job's artifact selects the behaviour.
func helperExec(t *testing.T, marker string, mut func(*CommandConfig)) *CommandExecutor {
	t.Helper()
	cfg := CommandConfig{
		Argv:    []string{helperPath(t), "run", PlaceholderArtifact},
		Timeout: 10 * time.Second,
		// GOTRACEBACK=none keeps the runtime's fatal-error line inside the
		// stderr tail instead of pages of goroutine dumps.
		Env: map[string]string{helperEnv: "1", "WMRL_TEST_MARKER": marker, "GOTRACEBACK": "none"},
		// These tests are about containment, limits and classification:
		// the job runs as the stage (the hostile suite covers the jail).
		Config: jail.Config{TempDir: t.TempDir(), AllowWeakContainment: true, RunAs: stageRunAs()},
	}
	if mut != nil {
		mut(&cfg)
	}
	e, err := NewCommandExecutor(cfg)
	if err != nil {
		t.Fatalf("NewCommandExecutor: %v", err)
	}
	return e
}

func job(behaviour string) Job {
	return Job{RunID: "run-1", GroupID: "g-1", RolloutID: behaviour, Step: 3, Artifact: []byte(behaviour), ArtifactName: "solution.txt"}
}

func TestCommandExecutorBehaviours(t *testing.T) {
	tests := []struct {
		name      string
		artifact  string
		timeout   time.Duration
		limits    jail.Limits
		tailBytes int // StderrTail override
		want      Status
		score     float64
		exit      int
		reason    string // substring of Reason
		stderr    string // substring of StderrTail
		forks     bool   // stderr names a grandchild that must be dead
		maxWallMS int64  // upper bound on Duration, 0 = none
	}{
		{name: "good", artifact: "good", want: StatusOK, score: 0.75, exit: 0},
		{name: "infinite loop hits wall clock", artifact: "spin", timeout: 300 * time.Millisecond, want: StatusTimeout, exit: -1, reason: "wall-clock timeout", maxWallMS: 3000},
		{name: "sleep past timeout", artifact: "sleep", timeout: 300 * time.Millisecond, want: StatusTimeout, exit: -1, reason: "wall-clock timeout", maxWallMS: 3000},
		{name: "infinite loop hits cpu limit", artifact: "spin", timeout: 60 * time.Second, limits: jail.Limits{CPUSeconds: 1}, want: StatusTimeout, exit: -1, reason: "cpu time limit 1s exceeded: killed by SIG"}, // Go ignores SIGXCPU, so the hard limit's SIGKILL ends it
		{name: "grandchild outlives parent", artifact: "fork", want: StatusOK, score: 0.5, exit: 0, forks: true},
		{name: "grandchild with timed-out parent", artifact: "fork-sleep", timeout: 300 * time.Millisecond, want: StatusTimeout, exit: -1, forks: true, maxWallMS: 3000},
		// The Go runtime prints its fatal error before pages of stack, hence the big tail.
		{name: "memory hog hits address-space limit", artifact: "alloc 4096", limits: jail.Limits{AddressSpaceBytes: 2 << 30}, tailBytes: 64 << 10, want: StatusError, exit: 2, reason: "exit status 2", stderr: "out of memory"},
		{name: "small allocation under same limit", artifact: "alloc 16", limits: jail.Limits{AddressSpaceBytes: 2 << 30}, want: StatusOK, score: 0, exit: 0},
		{name: "file size limit", artifact: "write 4", limits: jail.Limits{FileSizeBytes: 1 << 20}, want: StatusError, exit: 4, stderr: "file too large"},
		{name: "garbage output", artifact: "garbage", want: StatusInvalid, exit: 0, reason: "not a JSON object"},
		{name: "score out of range", artifact: "range", want: StatusInvalid, exit: 0, reason: "1.5 outside [0, 1]"},
		{name: "non-zero exit with stderr", artifact: "fail", want: StatusError, exit: 3, reason: "exit status 3", stderr: "boom: training diverged\n"},
		{name: "killed by signal", artifact: "selfkill", want: StatusError, exit: -1, reason: "killed by signal SIGKILL"},
		{name: "stdout flood keeps last line", artifact: "flood", want: StatusOK, score: 0.25, exit: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if raceEnabled && tc.limits.AddressSpaceBytes != 0 {
				t.Skip("ThreadSanitizer cannot run under RLIMIT_AS")
			}
			_, marker := markerEnv(t)
			e := helperExec(t, marker, func(c *CommandConfig) {
				if tc.timeout > 0 {
					c.Timeout = tc.timeout
				}
				c.Limits = tc.limits
				c.StderrTail = tc.tailBytes
			})
			r := e.Execute(context.Background(), job(tc.artifact))
			t.Logf("result: status=%s score=%v exit=%d reason=%q dur=%s", r.Status, r.Score, r.ExitCode, r.Reason, r.Duration)
			if r.Status != tc.want {
				t.Fatalf("status = %s, want %s (reason %q, stderr %q)", r.Status, tc.want, r.Reason, r.StderrTail)
			}
			if r.ExitCode != tc.exit {
				t.Errorf("exit code = %d, want %d", r.ExitCode, tc.exit)
			}
			if tc.want == StatusOK && r.Score != tc.score {
				t.Errorf("score = %v, want %v", r.Score, tc.score)
			}
			if tc.want == StatusOK && r.Reason != "" {
				t.Errorf("OK result has reason %q", r.Reason)
			}
			if !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", r.Reason, tc.reason)
			}
			if !strings.Contains(r.StderrTail, tc.stderr) {
				t.Errorf("stderr tail %q does not contain %q", r.StderrTail, tc.stderr)
			}
			if tc.tailBytes == 0 && len(r.StderrTail) > DefaultStderrTail {
				t.Errorf("stderr tail has %d bytes, cap %d", len(r.StderrTail), DefaultStderrTail)
			}
			if tc.maxWallMS > 0 && r.Duration > time.Duration(tc.maxWallMS)*time.Millisecond {
				t.Errorf("duration %s exceeds %d ms", r.Duration, tc.maxWallMS)
			}
			if tc.forks {
				pid := grandchildPid(t, r.StderrTail)
				deadline := time.Now().Add(3 * time.Second)
				for procAlive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if procAlive(pid) {
					t.Errorf("grandchild %d still alive", pid)
				}
			}
			assertNoLeftovers(t, marker)
			assertEmptyDir(t, e.Config().TempDir)
		})
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("job dir not removed: %v", ents)
	}
}

// The scanner used by assertNoLeftovers must see a marked process while it
// runs, or the leftover assertions above would pass vacuously.
func TestMarkerScannerSeesRunningJob(t *testing.T) {
	_, marker := markerEnv(t)
	e := helperExec(t, marker, func(c *CommandConfig) { c.Timeout = 2 * time.Second })
	done := make(chan Result)
	go func() { done <- e.Execute(context.Background(), job("fork-sleep")) }()
	deadline := time.Now().Add(2 * time.Second)
	seen := 0
	for time.Now().Before(deadline) && seen < 2 {
		seen = len(markedProcs(marker))
		time.Sleep(10 * time.Millisecond)
	}
	if seen < 2 {
		t.Errorf("scanner saw %d marked processes, want child and grandchild", seen)
	}
	if r := <-done; r.Status != StatusTimeout {
		t.Errorf("status %s, want timeout", r.Status)
	}
	assertNoLeftovers(t, marker)
}

func TestCommandExecutorEnvironmentAndDir(t *testing.T) {
	t.Setenv("WMRL_TEST_SECRET", "hunter2")
	t.Setenv("SANDBOX_TEST_ALLOWED", "yes")
	_, marker := markerEnv(t)
	e := helperExec(t, marker, func(c *CommandConfig) {
		c.EnvAllow = []string{"SANDBOX_TEST_ALLOWED", "SANDBOX_TEST_UNSET"}
		c.Env["WMRL_TEST_JOBDIR"] = PlaceholderDir
		c.Limits = jail.Limits{CPUSeconds: 30}
	})
	r := e.Execute(context.Background(), job("inspect"))
	if r.Status != StatusOK {
		t.Fatalf("status %s: %s %s", r.Status, r.Reason, r.StderrTail)
	}
	var got helperInspect
	if err := json.Unmarshal([]byte(r.StderrTail), &got); err != nil {
		t.Fatalf("decode inspect output %q: %v", r.StderrTail, err)
	}
	env := map[string]string{}
	for _, kv := range got.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if _, ok := env["WMRL_TEST_SECRET"]; ok {
		t.Errorf("secret leaked into child env")
	}
	if _, ok := env["SANDBOX_TEST_UNSET"]; ok {
		t.Errorf("unset allowlisted variable appeared")
	}
	want := map[string]string{
		"SANDBOX_TEST_ALLOWED": "yes",
		"PATH":                 jail.DefaultPath,
		"HOME":                 got.Cwd,
		"TMPDIR":               got.Cwd,
		"WMRL_TEST_JOBDIR":     got.Cwd,
		helperEnv:              "1",
		"WMRL_TEST_MARKER":     marker,
		"GOTRACEBACK":          "none",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Errorf("child env has extra variables: %v", keys)
	}
	if filepath.Dir(got.Cwd) != e.Config().TempDir {
		t.Errorf("cwd %q not inside %q", got.Cwd, e.Config().TempDir)
	}
	if got.CwdMode != 0o700 {
		t.Errorf("job dir mode %o, want 700", got.CwdMode)
	}
	if got.Artifact != "inspect" {
		t.Errorf("artifact content %q", got.Artifact)
	}
	if got.Pgid != got.Pid {
		t.Errorf("child is not its own process group leader: pgid %d pid %d", got.Pgid, got.Pid)
	}
	if _, err := os.Stat(got.Cwd); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("job dir %s still exists (err %v)", got.Cwd, err)
	}
	assertEmptyDir(t, e.Config().TempDir)
	assertNoLeftovers(t, marker)
}

func TestCommandExecutorCancel(t *testing.T) {
	_, marker := markerEnv(t)
	e := helperExec(t, marker, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r := e.Execute(ctx, job("fork-sleep"))
	if r.Status != StatusError || !r.Canceled() || !strings.HasPrefix(r.Reason, "canceled") {
		t.Fatalf("got %s canceled=%v %q, want canceled error", r.Status, r.Canceled(), r.Reason)
	}
	if s, ok := PolicyZero.Apply(r); ok {
		t.Errorf("canceled result usable (score %v)", s)
	}
	assertNoLeftovers(t, marker)
	// Already-canceled context: nothing is started.
	r = e.Execute(ctx, job("good"))
	if !r.Canceled() {
		t.Errorf("pre-canceled job not reported canceled: %+v", r)
	}
}

// Under a bare process group (the last-resort containment) a process that
// calls setsid leaves the group and cannot be killed by it; the executor must
// still return promptly (not block on the pipe it holds) and say so. This
// documents the limit that the cgroup and PID-namespace containments close.
func TestCommandExecutorEscapedProcessDoesNotBlock(t *testing.T) {
	_, marker := markerEnv(t)
	e := helperExec(t, marker, func(c *CommandConfig) {
		c.KillGrace = 100 * time.Millisecond
		c.Containment = jail.ContainmentProcessGroup
	})
	start := time.Now()
	r := e.Execute(context.Background(), job("escape"))
	pid := grandchildPid(t, r.StderrTail)
	t.Cleanup(func() { _ = killPid(pid) })
	if time.Since(start) > 3*time.Second {
		t.Errorf("Execute blocked %s on an escaped process", time.Since(start))
	}
	if r.Status != StatusOK || !strings.Contains(r.Reason, "held open by an escaped process") {
		t.Errorf("got %s %q", r.Status, r.Reason)
	}
}

func TestCommandExecutorArtifactName(t *testing.T) {
	_, marker := markerEnv(t)
	e := helperExec(t, marker, nil)
	for _, name := range []string{"../evil", "a/b", "..", "."} {
		j := job("good")
		j.ArtifactName = name
		if r := e.Execute(context.Background(), j); r.Status != StatusInvalid {
			t.Errorf("artifact name %q: status %s", name, r.Status)
		}
	}
	assertEmptyDir(t, e.Config().TempDir)
}

func TestNewCommandExecutorErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  CommandConfig
		want error
	}{
		{"empty argv", CommandConfig{}, ErrConfig},
		{"unknown command", CommandConfig{Argv: []string{"wmrl-no-such-command"}}, ErrConfig},
		{"bad score range", CommandConfig{Argv: []string{"true"}, ScoreMin: 1, ScoreMax: 1}, ErrConfig},
		{"bad env name", CommandConfig{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, ErrConfig},
		{"meta placeholder without key", CommandConfig{Argv: []string{"true", "{meta.}"}}, ErrConfig},
		{"meta placeholder unclosed in env", CommandConfig{Argv: []string{"true"}, Env: map[string]string{"L": "{meta.label"}}, ErrConfig},
		{"private meta in the single step", CommandConfig{Argv: []string{"true", "{meta.label}"}}, ErrPrivateData},
		{"private meta in the run step's env", CommandConfig{Argv: []string{"true"}, GradeArgv: []string{"true"}, InputMeta: []string{"task"}, Env: map[string]string{"L": "{meta.label}"}}, ErrPrivateData},
		{"artifact in the grade step", CommandConfig{Argv: []string{"true"}, GradeArgv: []string{"true", "{artifact}"}}, ErrConfig},
		{"grade settings without a grade step", CommandConfig{Argv: []string{"true"}, GradeReadOnlyPaths: []string{"/opt"}}, ErrConfig},
		{"stage setting allowed into the job", CommandConfig{Argv: []string{"true"}, EnvAllow: []string{"WMRL_SASL_PASSWORD"}}, ErrEnvAllow},
		{"no jail", CommandConfig{Argv: []string{"true"}}, jail.ErrWeakContainment},
		{"prlimit missing", CommandConfig{Argv: []string{"true"}, Config: jail.Config{Limits: jail.Limits{CPUSeconds: 1}, PrlimitPath: "/nonexistent/prlimit"}}, jail.ErrPrlimitMissing},
		{"bwrap missing", CommandConfig{Argv: []string{"true"}, Config: jail.Config{UseBwrap: true, BwrapPath: "/nonexistent/bwrap"}}, jail.ErrBwrapMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCommandExecutor(tc.cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// A C program keeps SIGXCPU's default action, so the soft CPU limit ends it
// (the Go helper above ignores SIGXCPU and meets the hard limit instead).
func TestCommandExecutorSIGXCPU(t *testing.T) {
	_, marker := markerEnv(t)
	e, err := NewCommandExecutor(CommandConfig{
		Argv:    []string{"sh", "-c", "while :; do :; done"},
		Timeout: 60 * time.Second,
		Env:     map[string]string{"WMRL_TEST_MARKER": marker},
		// Weak on purpose: the CPU limit is under test, not the jail.
		Config: jail.Config{Limits: jail.Limits{CPUSeconds: 1}, TempDir: t.TempDir(), AllowWeakContainment: true, RunAs: stageRunAs()},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := e.Execute(context.Background(), Job{RolloutID: "spin"})
	if r.Status != StatusTimeout || r.Reason != "cpu time limit 1s exceeded: killed by SIGXCPU" {
		t.Fatalf("got %s %q", r.Status, r.Reason)
	}
	assertNoLeftovers(t, marker)
}

// What each step finds: the single step and the run step get the artifact and the --input-meta
// keys only (no rollout.json, no private key in {meta.KEY}); the grade step gets rollout.json
// and the run step's outputs under run/, never the artifact.
func TestCommandExecutorStepsSee(t *testing.T) {
	// Each program reports what it sees as its score: 1 when it found the thing, 0 when not.
	see := func(test string) []string {
		return []string{"/bin/sh", "-c", "if " + test + "; then echo '{\"score\": 1}'; else echo '{\"score\": 0}'; fi"}
	}
	base := CommandConfig{Timeout: 10 * time.Second, InputMeta: []string{"task"}, Config: jail.Config{UseBwrap: true, Limits: jail.DefaultLimits()}}
	j := Job{RolloutID: "r", Artifact: []byte("print(42)"), ArtifactName: "solution.py", Rollout: []byte(`{"meta":{"label":"7","task":"add"}}`),
		Meta: map[string]string{"label": "7", "task": "add"}}
	tests := []struct {
		name       string
		argv, grad []string
		want       float64
	}{
		{"single step has the artifact", see("test -s {artifact}"), nil, 1},
		{"single step has the input meta", see("test {meta.task} = add"), nil, 1},
		{"single step has no rollout.json", see("test -e {dir}/rollout.json"), nil, 0},
		{"run step has no rollout.json", []string{"/bin/sh", "-c", "ls {dir} > {dir}/out/ls"}, see("grep -q rollout {dir}/run/out/ls || ! grep -q solution.py {dir}/run/out/ls"), 0},
		{"grade step has rollout.json", []string{"true"}, see("grep -q '\"label\":\"7\"' {dir}/rollout.json"), 1},
		{"grade step has private meta", []string{"true"}, see("test {meta.label} = 7"), 1},
		{"grade step has no artifact", []string{"true"}, see("ls -R {dir} | grep -q solution.py"), 0},
		{"grade step has run stdout and exit status", []string{"/bin/sh", "-c", "echo forty-two; exit 3"}, see("grep -qx forty-two {dir}/run/stdout && grep -qx 3 {dir}/run/exit_status"), 1},
		{"grade step gets at most 1024 output files and the reason", []string{"/bin/sh", "-c", "cd {dir}/out && i=0 && while [ $i -lt 1100 ]; do echo $i > f$i; i=$((i+1)); done"},
			see("test $(ls {dir}/run/out | wc -l) = 1024 && grep -q 'more than 1024 files' {dir}/run/error"), 1},
		{"grade step has the output directory", []string{"/bin/sh", "-c", "mkdir -p {dir}/out/a && echo x > {dir}/out/a/b"}, see("grep -qx x {dir}/run/out/a/b && test ! -w {dir}/run/out/a/b -o $(id -u) = 0"), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Argv, cfg.GradeArgv = tc.argv, tc.grad
			cfg.TempDir = t.TempDir()
			e, err := NewCommandExecutor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := e.Execute(context.Background(), j)
			if r.Status != StatusOK || r.Score != tc.want {
				t.Fatalf("got %s %v (%s, stderr %q), want %v", r.Status, r.Score, r.Reason, r.StderrTail, tc.want)
			}
			assertEmptyDir(t, cfg.TempDir)
		})
	}
}
