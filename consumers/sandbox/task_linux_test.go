package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// taskPython runs the task scripts: by its absolute path, as docs/stages.md says.
const taskPython = "/usr/bin/python3"

// taskFixture copies testdata/tasks where every uid can read it (the job's uid
// is 65534 for a root stage) and outside /tmp, which the jail replaces.
func taskFixture(t *testing.T, owner int) string {
	t.Helper()
	if _, err := os.Stat(taskPython); err != nil {
		t.Skipf("the task scripts are Python: %v", err)
	}
	tasks := filepath.Join(hostileDir(t, owner), "tasks")
	copyTree(t, "testdata/tasks", tasks)
	return tasks
}

// mathTaskConfig and codeTaskConfig are the two tasks of docs/stages.md, flag
// for flag, over DefaultCommandConfig (the CLI's defaults).
func mathTaskConfig(tasks string) CommandConfig {
	cfg := DefaultCommandConfig()
	cfg.Argv = []string{"/bin/cat", PlaceholderArtifact}
	cfg.GradeArgv = []string{taskPython, "-I", filepath.Join(tasks, "math", "grade.py"), PlaceholderDir}
	return cfg
}

func codeTaskConfig(tasks string) CommandConfig {
	cfg := DefaultCommandConfig()
	cfg.InputMeta = []string{"task"}
	cfg.Argv = []string{taskPython, "-I", filepath.Join(tasks, "code", "public", "harness.py"), PlaceholderArtifact,
		filepath.Join(tasks, "code", "public", "{meta.task}", "cases"), "{dir}/out"}
	cfg.Env = map[string]string{"CASE_TIMEOUT": "2"}
	cfg.GradeArgv = []string{taskPython, "-I", filepath.Join(tasks, "code", "private", "grade.py"), "{dir}/run",
		filepath.Join(tasks, "code", "private", "{meta.task}")}
	return cfg
}

// taskHandler is the stage's handler over one slot of cfg's executor.
func taskHandler(t testing.TB, cfg CommandConfig) *Handler {
	t.Helper()
	e, err := NewCommandExecutor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool(e, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(HandlerConfig{Pool: pool, ArtifactName: "solution.py"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// handleTask runs one rollout through h and returns its executed record.
func handleTask(t *testing.T, h *Handler, meta map[string]string, artifact string) topics.ExecutedReward {
	t.Helper()
	r := anchorRollout(artifact)
	r.Meta = meta
	outs, err := h.Handle(context.Background(), encodeRollout(t, r))
	// A job that fails is recorded (one executed record) and flagged to the stage runtime
	// as a failure, never a dead letter.
	var failed *stage.FailedError
	if (err != nil && !errors.As(err, &failed)) || len(outs) != 1 {
		t.Fatalf("Handle: %v, %d records", err, len(outs))
	}
	got, derr := topics.DecodeExecuted(outs[0].Value)
	if derr != nil {
		t.Fatal(derr)
	}
	if (err == nil) != (got.Status == topics.StatusOK) {
		t.Fatalf("record %s, handler error %v", got.Status, err)
	}
	return got
}

// The two tasks of docs/stages.md end to end through the stage's handler and
// the default jail, in two steps: the run step executes the artifact with its
// public input only, the grade step scores what came back against the
// private data (the label in rollout.json; the hidden expected outputs).
func TestTaskExamples(t *testing.T) {
	tasks := taskFixture(t, os.Geteuid())
	math := taskHandler(t, mathTaskConfig(tasks))
	code := taskHandler(t, codeTaskConfig(tasks))

	const addOK = "a, b = map(int, input().split())\nprint(a + b)\n"
	tests := []struct {
		name     string
		h        *Handler
		meta     map[string]string
		artifact string
		status   topics.Status
		score    float64
		reason   string // substring of the record's reason (non-ok)
		stderr   string // substring of the record's stderr tail
	}{
		{"math right", math, map[string]string{"label": "42"}, "6 * 7, so the answer is 42", topics.StatusOK, 1, "", "answer '42', label '42'"},
		{"math wrong boxed", math, map[string]string{"label": "42"}, "I think 42 is close, but \\boxed{41}", topics.StatusOK, 0, "", ""},
		{"math fraction", math, map[string]string{"label": "3/4"}, "the probability is 0.75", topics.StatusOK, 1, "", ""},
		{"math without label", math, map[string]string{"source": "gsm8k"}, "42", topics.StatusError, 0, "grade step: exit status 2", "has no meta label"},
		{"code passes", code, map[string]string{"task": "add"}, addOK, topics.StatusOK, 1, "", "large: pass"},
		{"code partly wrong", code, map[string]string{"task": "add"}, "a, b = map(int, input().split())\nprint(a - b)\n", topics.StatusOK, 0.25, "", "zero: pass"},
		{"code other task", code, map[string]string{"task": "reverse"}, "print(input()[::-1])\n", topics.StatusOK, 1, "", ""},
		{"code does not run", code, map[string]string{"task": "reverse"}, "def reverse(s) return s", topics.StatusOK, 0, "", "SyntaxError"},
		{"code crashes on one case", code, map[string]string{"task": "add"}, "a, b = map(int, input().split())\nassert a != 0\nprint(a + b)\n", topics.StatusOK, 0.75, "", "zero: fail"},
		{"code case timeout", code, map[string]string{"task": "reverse"}, "s = input()\nwhile not s: pass\nprint(s[::-1])\n", topics.StatusOK, 0.5, "", "empty: fail"},
		{"code unknown task", code, map[string]string{"task": "nosuch"}, addOK, topics.StatusError, 0, "grade step: exit status 2", "no expected outputs"},
		{"code meta key missing", code, map[string]string{"label": "x"}, addOK, topics.StatusError, 0, `run step: sandbox: meta key missing: rollout "1-0-3" has no meta key "task"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := handleTask(t, tc.h, tc.meta, tc.artifact)
			score := -1.0
			if got.Score != nil {
				score = *got.Score
			}
			if got.Status != tc.status || (tc.status == topics.StatusOK && score != tc.score) || !strings.Contains(got.Reason, tc.reason) || !strings.Contains(got.StderrTail, tc.stderr) {
				t.Fatalf("got %s score %v reason %q stderr %q; want %s %v %q %q", got.Status, score, got.Reason, got.StderrTail, tc.status, tc.score, tc.reason, tc.stderr)
			}
		})
	}
}

// A task whose private files the run step would see is refused at start-up:
// the run step's read-only paths (the shared ones included) must not hold the
// grade step's.
func TestTaskPrivateApart(t *testing.T) {
	tasks := taskFixture(t, os.Geteuid())
	private := filepath.Join(tasks, "code", "private")
	tests := []struct {
		name string
		mut  func(*CommandConfig)
		want error
	}{
		{"public and private apart", func(*CommandConfig) {}, nil},
		{"grader next to the harness", func(c *CommandConfig) {
			c.GradeArgv[2] = filepath.Join(tasks, "code", "public", "harness.py")
		}, ErrPrivateData},
		{"task root bound into both steps", func(c *CommandConfig) { c.ReadOnlyPaths = []string{filepath.Join(tasks, "code")} }, ErrPrivateData},
		{"task root bound into the run step", func(c *CommandConfig) { c.RunReadOnlyPaths = []string{tasks} }, ErrPrivateData},
		{"private data bound into the run step", func(c *CommandConfig) {
			c.RunReadOnlyPaths = []string{private}
		}, ErrPrivateData},
		{"private data through a symlink", func(c *CommandConfig) {
			link := filepath.Join(tasks, "link")
			if err := os.Symlink(filepath.Join(tasks, "code"), link); err != nil {
				t.Fatal(err)
			}
			c.RunReadOnlyPaths = []string{link}
		}, ErrPrivateData},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := codeTaskConfig(tasks)
			tc.mut(&cfg)
			_, err := NewCommandExecutor(cfg)
			if !errors.Is(err, tc.want) || (tc.want != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// copyTree copies a directory of small files, readable by every uid.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// --allow-network gives the jail the host's network; without it the host's
// loopback is out of reach.
func TestCommandExecutorJailNetwork(t *testing.T) {
	if raceEnabled {
		t.Skip("the helper is the test binary: see TestHostileJobs")
	}
	bin := filepath.Join(hostileDir(t, os.Geteuid()), "hostile")
	copyFile(t, helperPath(t), bin)
	port, accepted := loopbackListener(t)
	for _, allow := range []bool{false, true} {
		cfg := DefaultCommandConfig()
		cfg.Argv = []string{bin, "run", PlaceholderArtifact}
		cfg.Env = map[string]string{helperEnv: "1"}
		cfg.Timeout = 20 * time.Second
		cfg.AllowNetwork = allow
		e, err := NewCommandExecutor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := accepted.Load()
		r := e.Execute(context.Background(), Job{RolloutID: "net", Artifact: []byte("attack network " + port)})
		if got := accepted.Load() > before; got != allow || !strings.Contains(r.StderrTail, "attack-ran") {
			t.Errorf("AllowNetwork=%v: connected=%v (%s %s %q)", allow, got, r.Status, r.Reason, r.StderrTail)
		}
	}
}
