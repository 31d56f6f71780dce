package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/topics"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"1048576", 1 << 20, true},
		{"4GiB", 4 << 30, true},
		{"4G", 4 << 30, true},
		{"512MiB", 512 << 20, true},
		{"512 mi", 512 << 20, true},
		{"1.5K", 1536, true},
		{"2TiB", 2 << 40, true},
		{"10b", 10, true},
		{"", 0, false},
		{"-1", 0, false},
		{"4GB", 0, false},
		{"1.3", 0, false},
		{"abc", 0, false},
		{"99999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseArgv(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
		ok   bool
	}{
		{[]string{"python3", "{artifact}"}, []string{"python3", "{artifact}"}, true},
		{[]string{`["python3", "-u", "{artifact}"]`}, []string{"python3", "-u", "{artifact}"}, true},
		{[]string{"/bin/true"}, []string{"/bin/true"}, true},
		{[]string{`["python3", 3]`}, nil, false},
		{[]string{`[]`}, nil, false},
		{nil, nil, false},
		{[]string{""}, nil, false},
	}
	for _, tt := range tests {
		got, err := parseArgv("--argv", tt.in)
		if (err == nil) != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseArgv(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseRunAs(t *testing.T) {
	if r, err := parseRunAs("1000:1001"); err != nil || r.UID != 1000 || r.GID != 1001 {
		t.Errorf("parseRunAs(1000:1001) = %+v, %v", r, err)
	}
	for _, bad := range []string{"1000", "a:b", "1000:", "-1:0"} {
		if _, err := parseRunAs(bad); err == nil {
			t.Errorf("parseRunAs(%q) succeeded", bad)
		}
	}
}

// The sandbox's step flags: a grade step unless --single-step-no-private says there is none, the
// run step never handed private data, each step its own read-only paths and environment.
func TestSandboxStepFlags(t *testing.T) {
	const run, grade = `--argv=["/bin/cat", "{artifact}"]`, `--grade-argv=["/bin/sh", "-c", "echo", "{dir}"]`
	tests := []struct {
		name  string
		args  []string
		check func(sandbox.CommandConfig) bool
		err   string // substring of the error; "" for none
	}{
		{"two steps", []string{run, grade, "--input-meta", "task", "--input-meta", "lang", "--run-ro-bind", "/srv/public", "--grade-ro-bind", "/srv/private",
			"--ro-bind", "/opt/venv", "--grade-env", "K={meta.label}", "--env", "T={meta.task}", "--grade-timeout", "5s", "--run-output-size", "1MiB"},
			func(c sandbox.CommandConfig) bool {
				return slices.Equal(c.Argv, []string{"/bin/cat", "{artifact}"}) && slices.Equal(c.GradeArgv, []string{"/bin/sh", "-c", "echo", "{dir}"}) &&
					slices.Equal(c.InputMeta, []string{"task", "lang"}) && slices.Equal(c.RunReadOnlyPaths, []string{"/srv/public"}) &&
					slices.Equal(c.GradeReadOnlyPaths, []string{"/srv/private"}) && slices.Equal(c.ReadOnlyPaths, []string{"/opt/venv"}) &&
					c.GradeEnv["K"] == "{meta.label}" && c.Env["T"] == "{meta.task}" && c.GradeTimeout == 5*time.Second && c.RunOutputLimit == 1<<20
			}, ""},
		{"defaults", []string{run, grade}, func(c sandbox.CommandConfig) bool {
			return c.Timeout == sandbox.DefaultTimeout && c.GradeTimeout == sandbox.DefaultGradeTimeout && c.RunOutputLimit == sandbox.DefaultRunOutputLimit &&
				len(c.InputMeta) == 0 && c.UseBwrap
		}, ""},
		{"single step by name", []string{run, "--single-step-no-private"}, func(c sandbox.CommandConfig) bool { return len(c.GradeArgv) == 0 }, ""},
		{"no grade step", []string{run}, nil, "--grade-argv is required"},
		{"both", []string{run, grade, "--single-step-no-private"}, nil, "exclude each other"},
		{"grade flags without a grade step", []string{run, "--single-step-no-private", "--grade-ro-bind", "/srv/private"}, nil, "need --grade-argv"},
		{"empty grade argv", []string{run, "--grade-argv", "[]"}, nil, "--grade-argv is required: the step's command"},
		{"bad run output size", []string{run, grade, "--run-output-size", "0"}, nil, "--run-output-size 0: want a size above 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &sandboxOptions{a: &app{log: slog.New(slog.DiscardHandler)}}
			if err := o.command().ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := o.commandConfig()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !tc.check(cfg) {
				t.Fatalf("err = %v, config %+v", err, cfg)
			}
		})
	}
}

// What the executor refuses from the flags: a private meta key in the run step (or the single
// step), the artifact in the grade step.
func TestSandboxStepFlagsRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want error
	}{
		{"label in the run step", []string{"--argv", "/bin/echo", "--argv", "{meta.label}", "--grade-argv", "/bin/true"}, sandbox.ErrPrivateData},
		{"label in the run step's env", []string{"--argv", "/bin/true", "--env", "L={meta.label}", "--grade-argv", "/bin/true"}, sandbox.ErrPrivateData},
		{"label in the single step", []string{"--argv", "/bin/echo", "--argv", "{meta.label}", "--single-step-no-private"}, sandbox.ErrPrivateData},
		{"artifact in the grade step", []string{"--argv", "/bin/true", "--grade-argv", "/bin/cat", "--grade-argv", "{artifact}"}, sandbox.ErrConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &sandboxOptions{a: &app{log: slog.New(slog.DiscardHandler)}}
			if err := o.command().ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := o.commandConfig()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sandbox.NewCommandExecutor(cfg); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// The two tasks of docs/stages.md, command line as written (with /opt/task/ pointing at
// consumers/sandbox/testdata/tasks), through the CLI's flags, the default jail and the stage's
// handler: the outcomes the doc states.
func TestSandboxDocTasks(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("the task scripts are Python: %v", err)
	}
	doc, err := os.ReadFile("../../docs/stages.md")
	if err != nil {
		t.Fatal(err)
	}
	// Readable by the jobs' uid (65534 for a root stage) and outside /tmp, which the jail replaces.
	tasks, err := os.MkdirTemp("/var/tmp", "wmrl-doc-tasks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tasks) })
	if err := os.Chmod(tasks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(tasks, os.DirFS("../../consumers/sandbox/testdata/tasks")); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(tasks, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
	}); err != nil {
		t.Fatal(err)
	}
	type rollout struct {
		meta     map[string]string
		artifact string
		status   topics.Status
		score    float64
	}
	tests := []struct {
		heading  string
		rollouts []rollout
	}{
		{"**A math task graded against `label`.**", []rollout{
			{map[string]string{"label": "42"}, "6 * 7, so the answer is 42", topics.StatusOK, 1},
			{map[string]string{"label": "3/4"}, "the probability is 0.75", topics.StatusOK, 1},
			{map[string]string{"source": "gsm8k"}, "42", topics.StatusError, 0},
		}},
		{"**A code task with hidden tests.**", []rollout{
			{map[string]string{"task": "add"}, "a, b = map(int, input().split())\nprint(a - b)\n", topics.StatusOK, 0.25},
			{map[string]string{"task": "add"}, "import json, os\nprint(json.dumps({\"score\": 1}), flush=True)\nos._exit(0)\n", topics.StatusOK, 0},
			{map[string]string{"task": "nosuch"}, "print(1)\n", topics.StatusError, 0},
			{map[string]string{"label": "x"}, "print(1)\n", topics.StatusError, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.heading, func(t *testing.T) {
			_, rest, ok := strings.Cut(string(doc), tc.heading)
			_, block, ok2 := strings.Cut(rest, "```sh\n")
			block, _, ok3 := strings.Cut(block, "```")
			if !ok || !ok2 || !ok3 {
				t.Fatalf("docs/stages.md: no sh block after %q", tc.heading)
			}
			line := strings.NewReplacer("\\\n", " ", "\n", " ", "/opt/task/", tasks+"/").Replace(block)
			words, err := shellWords(line)
			if err != nil || len(words) < 2 || words[0] != "wmrl" || words[1] != "sandbox" {
				t.Fatalf("not a wmrl sandbox command: %q (%v)", words, err)
			}
			o := &sandboxOptions{a: &app{log: slog.New(slog.DiscardHandler)}}
			if err := o.command().ParseFlags(words[2:]); err != nil {
				t.Fatal(err)
			}
			cfg, err := o.commandConfig()
			if err != nil {
				t.Fatal(err)
			}
			exec, err := sandbox.NewCommandExecutor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pool, err := sandbox.NewPool(exec, 1)
			if err != nil {
				t.Fatal(err)
			}
			h, err := sandbox.NewHandler(sandbox.HandlerConfig{Pool: pool, ArtifactName: o.artifactName})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range tc.rollouts {
				rec, err := topics.NewNames("").RolloutRecord(topics.Rollout{RolloutRef: topics.RolloutRef{RunID: "run", Step: 1, GroupID: "1-0", RolloutID: fmt.Sprintf("1-0-%d", i), Stream: "main", PolicyVersion: "v1"},
					Anchor: true, Index: i, Artifact: r.artifact, Meta: r.meta, CreatedAt: time.Now()})
				if err != nil {
					t.Fatal(err)
				}
				outs, _ := h.Handle(context.Background(), rec)
				if len(outs) != 1 {
					t.Fatalf("rollout %d: %d records", i, len(outs))
				}
				got, err := topics.DecodeExecuted(outs[0].Value)
				if err != nil {
					t.Fatal(err)
				}
				score := "none"
				if got.Score != nil {
					score = fmt.Sprint(*got.Score)
				}
				if got.Status != r.status || (r.status == topics.StatusOK && score != fmt.Sprint(r.score)) {
					t.Errorf("rollout %d %q: %s %s (%s; stderr %q), want %s %v", i, r.artifact, got.Status, score, got.Reason, got.StderrTail, r.status, r.score)
				}
			}
		})
	}
}
