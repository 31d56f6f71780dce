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

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// The two tasks of docs/stages.md end to end through the stage's handler and
// the default (jailed) executor: the job reads its task from
// {dir}/rollout.json and {meta.KEY}, and grades the artifact against it.
func TestCommandExecutorTasks(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("the task graders are Python: %v", err)
	}
	// The graders must be readable by the job's uid (65534 for a root
	// stage) and lie outside /tmp, which the jail replaces.
	tasks := filepath.Join(hostileDir(t, os.Geteuid()), "tasks")
	copyTree(t, "testdata/tasks", tasks)

	newHandler := func(argv ...string) *Handler {
		e, err := NewCommandExecutor(CommandConfig{Argv: argv, Timeout: 30 * time.Second, Config: jail.Config{Limits: jail.DefaultLimits(), UseBwrap: true}})
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
	math := newHandler(python, filepath.Join(tasks, "math_grade.py"), "{dir}/"+RolloutFile, PlaceholderArtifact)
	code := newHandler(python, filepath.Join(tasks, "code", "run_tests.py"), PlaceholderArtifact,
		filepath.Join(tasks, "code", "{meta.task}", "test.py"))

	const addOK = "def add(a, b):\n    return a + b\n"
	tests := []struct {
		name     string
		h        *Handler
		meta     map[string]string
		artifact string
		status   topics.Status
		score    float64
		reason   string // substring of the record's reason (non-ok)
	}{
		{"math right", math, map[string]string{"label": "42"}, "6 * 7, so the answer is 42", topics.StatusOK, 1, ""},
		{"math wrong boxed", math, map[string]string{"label": "42"}, "I think 42 is close, but \\boxed{41}", topics.StatusOK, 0, ""},
		{"math fraction", math, map[string]string{"label": "3/4"}, "the probability is 0.75", topics.StatusOK, 1, ""},
		{"math without label", math, map[string]string{"source": "gsm8k"}, "42", topics.StatusError, 0, "exit status 2"},
		{"code passes", code, map[string]string{"task": "add"}, addOK, topics.StatusOK, 1, ""},
		{"code partly wrong", code, map[string]string{"task": "add"}, "def add(a, b):\n    return a - b\n", topics.StatusOK, 0.25, ""},
		{"code other task", code, map[string]string{"task": "reverse"}, "def reverse(s):\n    return s[::-1]\n", topics.StatusOK, 1, ""},
		{"code does not import", code, map[string]string{"task": "reverse"}, "def reverse(s) return s", topics.StatusOK, 0, ""},
		{"code unknown task", code, map[string]string{"task": "nosuch"}, addOK, topics.StatusError, 0, "exit status 2"},
		{"code meta key missing", code, map[string]string{"label": "x"}, addOK, topics.StatusError, 0, `rollout "1-0-3" has no meta key "task"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := anchorRollout(tc.artifact)
			r.Meta = tc.meta
			outs, err := tc.h.Handle(context.Background(), encodeRollout(t, r))
			// A job that fails is recorded (one executed record) and flagged to the stage runtime
			// as a failure, never a dead letter.
			var failed *stage.FailedError
			if (err != nil && (tc.status == topics.StatusOK || !errors.As(err, &failed))) || len(outs) != 1 {
				t.Fatalf("Handle: %v, %d records", err, len(outs))
			}
			got, err := topics.DecodeExecuted(outs[0].Value)
			if err != nil {
				t.Fatal(err)
			}
			score := -1.0
			if got.Score != nil {
				score = *got.Score
			}
			if got.Status != tc.status || (tc.status == topics.StatusOK && score != tc.score) || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("got %s score %v reason %q stderr %q; want %s %v %q", got.Status, score, got.Reason, got.StderrTail, tc.status, tc.score, tc.reason)
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
