package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/topics"
)

// The grade-forging half of the hostile suite: solutions of docs/stages.md's
// code task (tests hidden from the run step) that try to forge their grade or
// read the answer, through the stage's handler with the CLI's default flags,
// with the stage as root and as an unprivileged uid. Each attack's grade must
// be the honest grade of what the solution actually answered.

// gradeStageEnv marks the re-executed test binary as the unprivileged stage of
// TestHostileJobsGrade; its value is the fixture directory.
const gradeStageEnv = "WMRL_TEST_GRADE_STAGE"

// gradeStageUID is the unprivileged stage's uid: not hostileStageUID, whose
// RLIMIT_NPROC the containment suite's fork bombs exhaust.
const gradeStageUID = hostileStageUID + 1

// gradeHonest solves three of the four cases of task "add" (it gets negative
// numbers wrong): its honest grade is 0.75, and every attack below keeps it.
const gradeHonest = "a, b = map(int, input().split())\nprint(a + b if a >= 0 else 0)\n"

// gradeSecretPrefix starts the label the read-label attack looks for: it knows
// the format, not the value.
const gradeSecretPrefix = "wmrl-label-"

// gradeAttack is one hostile solution and the grade it must get.
type gradeAttack struct {
	name     string
	artifact string // Python; PRIVATE_DIR is the private task directory, SECRET_PREFIX the secret's prefix
	want     float64
	// control runs the attack with a copy of the private directory bound
	// into the run step too (a misconfiguration), to show the attack finds
	// what it can see.
	control bool
}

var gradeAttacks = []gradeAttack{
	{name: "score-line-exit", want: 0, artifact: `import json, os, sys
print("attack-ran score-line-exit", file=sys.stderr)
print(json.dumps({"score": 1}), flush=True)
os._exit(0)
`},
	{name: "answer-then-score-line", want: 0, artifact: gradeHonest + `import json, os, sys
print("attack-ran answer-then-score-line", file=sys.stderr)
print(json.dumps({"score": 1}), flush=True)
os._exit(0)
`},
	{name: "stderr-score", want: 0.75, artifact: `import json, sys
print("attack-ran stderr-score", file=sys.stderr)
print(json.dumps({"score": 1}), file=sys.stderr)
` + gradeHonest},
	{name: "fake-result-files", want: 0.75, artifact: `import json, os, sys
print("attack-ran fake-result-files", file=sys.stderr)
out = os.path.join(os.getcwd(), "out")
fakes = {"score.json": json.dumps({"score": 1}), "result.json": json.dumps({"passed": 4, "total": 4}),
         "rollout.json": json.dumps({"meta": {"task": "add", "label": "0"}}), "exit_status": "0",
         "../.wmrl-run/exit": "0", "../.wmrl-run/stdout.all": json.dumps({"score": 1})}
for name, text in fakes.items():
    with open(os.path.join(out, name), "w") as f:
        f.write(text + "\n")
for case in ("small", "negative", "zero", "large"):
    with open(os.path.join(out, case + ".exit"), "w") as f:
        f.write("0\n")
for name, target in (("link", "/etc/passwd"), ("up", "..")):
    try:
        os.symlink(target, os.path.join(out, name))
    except OSError:
        pass
try:
    os.mkfifo(os.path.join(out, "fifo"))
except OSError:
    pass
` + gradeHonest},
	{name: "monkeypatch", want: 0.75, artifact: `import os, sys
print("attack-ran monkeypatch", file=sys.stderr)
payload = 'import json, os\nprint(json.dumps({"score": 1}), flush=True)\nos._exit(0)\n'
for d in (os.getcwd(), os.path.join(os.getcwd(), "out"), "/tmp", "/dev/shm"):
    for m in ("json.py", "os.py", "sitecustomize.py", "usercustomize.py", "subprocess.py", "grade.py"):
        try:
            with open(os.path.join(d, m), "w") as f:
                f.write(payload)
        except OSError:
            pass
harness = open("/proc/%d/cmdline" % os.getppid(), "rb").read().split(b"\0")[2].decode()
try:
    with open(harness, "w") as f:
        f.write(payload)
    print("harness overwritten", file=sys.stderr)
except OSError as e:
    print("harness not writable:", e.strerror, file=sys.stderr)
` + gradeHonest},
	{name: "read-label", want: 0.75, artifact: gradeReadLabel},
	{name: "read-label", want: 0.75, artifact: gradeReadLabel, control: true},
}

// gradeReadLabel looks for the label and the hidden tests everywhere the run
// step might reach: rollout.json next to it, its environment, every process's
// environment and command line in its /proc, every file outside the system
// directories, and the private task directory by its host path.
const gradeReadLabel = `import glob, os, sys
print("attack-ran read-label", file=sys.stderr)
found = []
prefix = "SECRET_PREFIX"  # split below, so that this file does not match itself
def scan(p):
    try:
        with open(p, "rb") as f:
            b = f.read(1 << 20)
    except OSError:
        return
    i = b.find(prefix.encode())
    if i >= 0:
        found.append("%s: %s" % (p, b[i:i + 48].split(b"\0")[0].decode(errors="replace")))
for p in ("rollout.json", os.path.join(os.environ.get("HOME", "."), "rollout.json")):
    scan(p)
found += ["env %s" % v for v in os.environ.values() if prefix in v]
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    scan(p)
skip = ("/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
for top in ["/", "PRIVATE_DIR"]:
    for d, dirs, files in os.walk(top):
        if d.startswith(skip) and d != "/dev/shm":
            dirs[:] = []
            continue
        for f in files:
            scan(os.path.join(d, f))
try:
    print("private listing", os.listdir("PRIVATE_DIR"), file=sys.stderr)
except OSError as e:
    print("private dir:", e.strerror, file=sys.stderr)
print("found", sorted(set(found))[:4], file=sys.stderr)
` + gradeHonest

// gradeAttackResult is one attack's executed record, as the stage wrote it.
type gradeAttackResult struct {
	Name    string
	Control bool
	Status  topics.Status
	Score   *float64
	Reason  string
	Stderr  string
}

// runGradeAttacks runs every attack as the calling uid, through the stage's
// handler over the CLI's default configuration of the code task; job
// directories go to jobs. tasks is a copy of testdata/tasks with a secret
// planted in the private directory.
func runGradeAttacks(tasks, jobs, secret string) ([]gradeAttackResult, error) {
	private := filepath.Join(tasks, "code", "private")
	handlers := map[bool]*Handler{}
	for _, control := range []bool{false, true} {
		cfg := codeTaskConfig(tasks)
		cfg.TempDir = jobs
		if control {
			// A copy of the private directory bound into both steps: the misconfiguration
			// NewCommandExecutor refuses for the private directory itself (privateApart).
			cfg.ReadOnlyPaths = []string{filepath.Join(tasks, "leaked")}
		}
		e, err := NewCommandExecutor(cfg)
		if err != nil {
			return nil, err
		}
		pool, err := NewPool(e, 1)
		if err != nil {
			return nil, err
		}
		if handlers[control], err = NewHandler(HandlerConfig{Pool: pool, ArtifactName: "solution.py"}); err != nil {
			return nil, err
		}
	}
	var out []gradeAttackResult
	for _, a := range gradeAttacks {
		r := anchorRollout(strings.NewReplacer("PRIVATE_DIR", private, `"SECRET_PREFIX"`, fmt.Sprintf("%q + %q", gradeSecretPrefix[:4], gradeSecretPrefix[4:])).Replace(a.artifact))
		r.Meta = map[string]string{"task": "add", "label": secret}
		rec, err := topics.NewNames("").RolloutRecord(r)
		if err != nil {
			return nil, err
		}
		recs, _ := handlers[a.control].Handle(context.Background(), &kgo.Record{Value: rec.Value})
		if len(recs) != 1 {
			return nil, fmt.Errorf("%s: %d records", a.name, len(recs))
		}
		got, err := topics.DecodeExecuted(recs[0].Value)
		if err != nil {
			return nil, err
		}
		out = append(out, gradeAttackResult{Name: a.name, Control: a.control, Status: got.Status, Score: got.Score, Reason: got.Reason, Stderr: got.StderrTail})
	}
	return out, nil
}

// gradeFixture copies the tasks into base (readable by every uid) and plants
// the secret: the rollouts' label, and a file among the hidden tests (and in
// the control's copy of them, tasks/leaked).
func gradeFixture(t *testing.T, base string) (tasks, jobs, secret string) {
	t.Helper()
	tasks, jobs = filepath.Join(base, "tasks"), filepath.Join(base, "jobs")
	copyTree(t, "testdata/tasks", tasks)
	secret = fmt.Sprintf("%s%d-%d", gradeSecretPrefix, os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(tasks, "code", "private", "add", "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(jobs, 0o755); err != nil {
		t.Fatal(err)
	}
	// The control's copy of the private directory (gradeAttack.control).
	copyTree(t, filepath.Join(tasks, "code", "private"), filepath.Join(tasks, "leaked"))
	return tasks, jobs, secret
}

func TestHostileJobsGrade(t *testing.T) {
	if raceEnabled {
		t.Skip("runs in the non-race pass, with the hostile suite")
	}
	if _, err := os.Stat(taskPython); err != nil {
		t.Skipf("the code task is Python: %v", err)
	}
	type stageAs struct {
		user      string
		uid       int
		delegated bool // in cgroups delegated to uid (delegateCgroups)
	}
	stages := []stageAs{{"root", 0, false}, {"non-root", gradeStageUID, false}, {"non-root, delegated cgroup", gradeStageUID, true}}
	if os.Geteuid() != 0 {
		stages = []stageAs{{"non-root", os.Geteuid(), false}}
	}
	for _, st := range stages {
		t.Run(st.user, func(t *testing.T) {
			base := hostileDir(t, st.uid)
			tasks, jobs, secret := gradeFixture(t, base)
			// The stage makes its job directories there.
			if err := os.Chown(jobs, st.uid, st.uid); err != nil && st.uid != os.Geteuid() {
				t.Fatal(err)
			}
			var results []gradeAttackResult
			if st.uid == os.Geteuid() {
				var err error
				if results, err = runGradeAttacks(tasks, jobs, secret); err != nil {
					t.Fatal(err)
				}
			} else {
				var enter func(int) error
				if st.delegated {
					if enter = delegateCgroups(t, st.uid); enter == nil {
						t.Skip("no cgroups to delegate on this host")
					}
				}
				results = runGradeStage(t, base, st.uid, enter)
			}
			checkGradeAttacks(t, results, secret)
		})
	}
}

// checkGradeAttacks asserts each attack's specific outcome.
func checkGradeAttacks(t *testing.T, results []gradeAttackResult, secret string) {
	t.Helper()
	if len(results) != len(gradeAttacks) {
		t.Fatalf("%d results for %d attacks", len(results), len(gradeAttacks))
	}
	for i, r := range results {
		a := gradeAttacks[i]
		name := a.name
		if a.control {
			name += " (control: a copy of the private directory bound into the run step)"
		}
		if r.Status != topics.StatusOK || r.Score == nil || *r.Score != a.want {
			t.Errorf("%s: %s score %v (%s), want ok %v; stderr:\n%s", name, r.Status, fmtScore(r.Score), r.Reason, a.want, r.Stderr)
			continue
		}
		if !strings.Contains(r.Stderr, "attack-ran "+a.name) {
			t.Errorf("%s: the attack did not run; stderr:\n%s", name, r.Stderr)
		}
		switch {
		case a.name == "monkeypatch" && (strings.Contains(r.Stderr, "harness overwritten") || !strings.Contains(r.Stderr, "harness not writable: Read-only file system")):
			t.Errorf("%s: the harness was writable; stderr:\n%s", name, r.Stderr)
		case a.name == "read-label" && a.control && !strings.Contains(r.Stderr, secret):
			t.Errorf("%s: the attack did not find the secret it could see; stderr:\n%s", name, r.Stderr)
		case a.name == "read-label" && !a.control && (strings.Contains(r.Stderr, secret) || !strings.Contains(r.Stderr, "found []") || !strings.Contains(r.Stderr, "private dir: No such file or directory")):
			t.Errorf("%s: the run step reached the label or the hidden tests; stderr:\n%s", name, r.Stderr)
		}
	}
}

func fmtScore(s *float64) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprint(*s)
}

// runGradeStage re-executes the test binary as uid (the unprivileged stage)
// and reads its results; with enter, the stage waits on stdin until enter
// has moved it into its delegated cgroups.
func runGradeStage(t *testing.T, base string, uid int, enter func(int) error) []gradeAttackResult {
	t.Helper()
	bin := filepath.Join(base, "stage")
	copyFile(t, helperPath(t), bin)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{gradeStageEnv + "=" + base, "PATH=" + jail.DefaultPath, "HOME=" + base, "TMPDIR=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var start io.WriteCloser
	if enter != nil {
		cmd.Env = append(cmd.Env, hostileWaitEnv+"=1")
		var err error
		if start, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if enter != nil {
		if err := enter(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			t.Fatal(err)
		}
		_, _ = start.Write([]byte("go\n"))
		start.Close()
	}
	err := cmd.Wait()
	out := []byte(stdout.String())
	if err != nil {
		t.Fatalf("stage as uid %d: %v\n%s", uid, err, stderr.String())
	}
	var results []gradeAttackResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("stage output: %v\n%s", err, out)
	}
	return results
}

// gradeStageMain is the unprivileged stage: TestMain calls it in the
// re-executed binary, which prints the attacks' records as JSON.
func gradeStageMain(base string) int {
	if os.Getenv(hostileWaitEnv) != "" {
		// Wait until the test has moved this process into its cgroups.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	tasks := filepath.Join(base, "tasks")
	secret, err := os.ReadFile(filepath.Join(tasks, "code", "private", "add", "secret.txt"))
	if err == nil {
		var results []gradeAttackResult
		if results, err = runGradeAttacks(tasks, filepath.Join(base, "jobs"), strings.TrimSpace(string(secret))); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(results)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grade stage:", err)
		return 1
	}
	return 0
}
