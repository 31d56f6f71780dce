package main

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestEveryCommandStopsOnSIGTERM starts each long-running command on the real broker and Redis,
// waits until it is at work, sends SIGTERM and requires exit status 0 — a requested stop is not
// a failure — within stopLimit. `generate --input -` is signalled while it waits for the next
// stdin line (it used to wait for that line and exit 2), `demo --dashboard` mid-run (its
// dashboard used to be closed twice, the second close waiting for ever).
func TestEveryCommandStopsOnSIGTERM(t *testing.T) {
	brokers := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	bin := buildWMRL(t, t.TempDir())
	h := &e2eHarness{t: t, bin: bin, global: []string{"--brokers", strings.Join(brokers, ","), "--redis", redisURL, "--topic-prefix", prefix}}
	groups := map[string]string{}
	for _, st := range []string{"worldmodel", "sandbox", "correct", "train", "analytics"} {
		groups[st] = unique + "-" + st
	}
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, groups) })
	h.run(time.Minute, 0, "topics", "create", "--partitions", "1")

	// A race-enabled binary sleeps 1 s at exit (ThreadSanitizer's atexit_sleep_ms).
	stopLimit := time.Second
	if raceEnabled() {
		stopLimit += 1500 * time.Millisecond
	}
	tests := []struct {
		name string
		args []string
		// busy is a line of the command's output that says it is at work.
		busy string
		// slow: reaching busy takes a whole (short) demo run, about 40 s under -race.
		slow bool
	}{
		{"worldmodel", []string{"worldmodel", "--base-url", liveJudge(t) + "/v1", "--model", "m", "--metrics-addr", "127.0.0.1:0", "--group", groups["worldmodel"]}, "partitions assigned", false},
		{"sandbox", []string{"sandbox", "--single-step-no-private", "--argv", `["/bin/true"]`, "--metrics-addr", "127.0.0.1:0", "--group", groups["sandbox"]}, "partitions assigned", false},
		{"correct", []string{"correct", "--metrics-addr", "127.0.0.1:0", "--transactional-id", unique + "-txn", "--group", groups["correct"], "--redis-prefix", unique}, "state loaded", false},
		{"train", []string{"train", "--run", "r", "--group", groups["train"]}, "", false},
		{"analytics", []string{"analytics", "--out", t.TempDir(), "--group", groups["analytics"]}, "", false},
		{"generate --input -", []string{"generate", "--backend", "jsonl", "--input", "-", "--run", "r", "--log-level", "debug"}, "", false},
		{"dashboard", []string{"dashboard", "--listen", "127.0.0.1:0", "--redis-prefix", unique}, "http://", false},
		{"demo --dashboard", []string{"demo", "--quick", "--dashboard", "127.0.0.1:0", "--out", ""}, "dashboard: http://", false},
		{"demo --dashboard, lingering after the run", []string{"demo", "--steps", "2", "--eval-problems", "1", "--dashboard", "127.0.0.1:0", "--out", ""}, "dashboard stays up", true},
		{"simulate", []string{"simulate", "--quick", "--out", ""}, "eval set", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := h.command(t.Context(), tt.args...)
			out := &testenv.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			// stdin stays open and empty: generate waits for a line that never comes.
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// At work: the busy line is out, and one more second has passed (the commands without
			// such a line are then blocked reading or computing).
			wait := 30 * time.Second
			if tt.slow {
				wait = 3 * time.Minute
			}
			deadline := time.Now().Add(wait)
			var busySince time.Time
			for busySince.IsZero() || time.Since(busySince) < time.Second {
				if busySince.IsZero() && strings.Contains(out.String(), tt.busy) {
					busySince = time.Now()
				}
				select {
				case err := <-done:
					t.Fatalf("exited before the signal: %v\n%s", err, out.String())
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatalf("not at work within %v:\n%s", wait, out.String())
				}
			}
			start := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				took := time.Since(start)
				if err != nil {
					t.Fatalf("exit after SIGTERM: %v (want status 0)\n%s", err, out.String())
				}
				if took > stopLimit {
					t.Errorf("stopped %v after SIGTERM, want within %v", took.Round(time.Millisecond), stopLimit)
				}
				t.Logf("stopped %v after SIGTERM, exit 0", took.Round(time.Millisecond))
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("still running 15 s after SIGTERM:\n%s", out.String())
			}
		})
	}
}

// raceEnabled reports whether the test binary (and so buildWMRL's binary) has the race detector.
func raceEnabled() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return true
			}
		}
	}
	return false
}

// TestGenerateFlagErrors: generate's mistakes are named as the other stages' are.
func TestGenerateFlagErrors(t *testing.T) {
	brokers := testenv.Kafka(t)
	fresh := testenv.Name(t) + "."
	bin := buildWMRL(t, t.TempDir())
	input := t.TempDir() + "/in.jsonl"
	if err := os.WriteFile(input, []byte(`{"step":0,"group_id":"g","prompt":"p","artifact":"a"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live := []string{"--brokers", strings.Join(brokers, ","), "--startup-timeout", "5s"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"--input without --backend jsonl", []string{"generate", "--run", "r", "--input", input}, "--input is read by --backend jsonl only; add --backend jsonl"},
		{"no run", []string{"generate", "--backend", "jsonl", "--input", input}, "--run is required"},
		{"missing topics", cat([]string{"generate", "--backend", "jsonl", "--input", input, "--run", "r", "--topic-prefix", fresh}, live),
			"wmrl topics create --topic-prefix " + fresh},
		{"deprecated --run-id still works", cat([]string{"generate", "--backend", "jsonl", "--input", input, "--run-id", "r", "--topic-prefix", fresh}, live),
			"Flag --run-id has been deprecated, use --run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = testenv.StageEnv()
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Fatalf("err %v, output %q, want a failure naming %q", err, out, tt.want)
			}
			if strings.Count(string(out), "producers:") > 1 {
				t.Errorf("stuttering prefixes: %q", out)
			}
		})
	}
}
