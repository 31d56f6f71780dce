package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/internal/testenv"
)

// bwrapWorks probes bwrap directly, independent of the code under test, so
// the test knows which outcome of NewCommandExecutor is correct here.
func bwrapWorks(t *testing.T) (string, error) {
	t.Helper()
	p, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skipf("bwrap not installed (Debian: apt-get install bubblewrap): %v", err)
	}
	out, err := exec.Command(p, "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/",
		"--dev", "/dev", "--proc", "/proc", "--", "true").CombinedOutput()
	if err != nil {
		return p, errors.New(strings.TrimSpace(string(out)))
	}
	return p, nil
}

func shellExec(t *testing.T, marker string, mut func(*CommandConfig)) (*CommandExecutor, error) {
	t.Helper()
	cfg := CommandConfig{
		Argv:    []string{"/bin/sh", PlaceholderArtifact},
		Timeout: 10 * time.Second,
		Env:     map[string]string{"WMRL_TEST_MARKER": marker},
		// The jobs run as the stage's uid here (its own user namespace in
		// bwrap), since the test binaries live in directories only it can
		// read; the hostile suite runs the default uid.
		Config: jail.Config{TempDir: t.TempDir(), AllowWeakContainment: true, RunAs: stageRunAs()},
	}
	if mut != nil {
		mut(&cfg)
	}
	return NewCommandExecutor(cfg)
}

func TestBwrapSandbox(t *testing.T) {
	_, probeErr := bwrapWorks(t)
	_, marker := markerEnv(t)
	e, err := shellExec(t, marker, func(c *CommandConfig) {
		c.UseBwrap = true
		c.Limits = jail.Limits{CPUSeconds: 30, FileSizeBytes: 64 << 20}
	})
	if probeErr != nil {
		// bwrap exists but cannot sandbox here: the constructor must say so.
		if !errors.Is(err, jail.ErrBwrapUnusable) {
			t.Fatalf("bwrap unusable here (%v) but NewCommandExecutor returned %v", probeErr, err)
		}
		// CI installs bubblewrap so the isolation cases run; a machine where it cannot sandbox
		// would pass this test without checking any of them.
		testenv.SkipOrFail(t, "bwrap unusable here, constructor reports it correctly (%v); isolation cases not run", err)
	}
	if err != nil {
		t.Fatalf("NewCommandExecutor with working bwrap: %v", err)
	}

	hostFile, err := os.CreateTemp("", "wmrl-bwrap-visible-")
	if err != nil {
		t.Fatal(err)
	}
	hostFile.Close()
	t.Cleanup(func() { os.Remove(hostFile.Name()) })

	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		want    Status
		reason  string
		stderr  string
	}{
		{name: "no network but loopback",
			script: `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' >&2; echo '{"score": 1}'`,
			want:   StatusOK, stderr: "lo\n"},
		{name: "root is read-only",
			script: `if touch /usr/wmrl-bwrap-probe 2>/dev/null; then echo writable >&2; exit 1; fi; echo '{"score": 1}'`,
			want:   StatusOK},
		{name: "host tmp invisible",
			script: `if [ -e ` + hostFile.Name() + ` ]; then echo visible >&2; exit 1; fi; echo '{"score": 1}'`,
			want:   StatusOK},
		{name: "job dir writable",
			script: `echo 0.5 > out.txt && echo "{\"score\": $(cat out.txt)}"`,
			want:   StatusOK},
		{name: "setsid escapee dies with the pid namespace",
			script: `setsid sleep 30 & echo '{"score": 1}'`,
			want:   StatusOK},
		{name: "timeout", script: `sleep 30`, timeout: 300 * time.Millisecond, want: StatusTimeout, reason: "wall-clock timeout"},
		{name: "signal through bwrap", script: `kill -SEGV $$`, want: StatusError, reason: "killed by signal SIGSEGV"},
		{name: "exit code through bwrap", script: `echo oops >&2; exit 7`, want: StatusError, reason: "exit status 7", stderr: "oops"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ex := e
			if tc.timeout > 0 {
				cfg := e.Config()
				cfg.Timeout = tc.timeout
				var err error
				if ex, err = NewCommandExecutor(cfg); err != nil {
					t.Fatal(err)
				}
			}
			r := ex.Execute(context.Background(), Job{RolloutID: tc.name, Artifact: []byte(tc.script), ArtifactName: "run.sh"})
			if r.Status != tc.want {
				t.Fatalf("status %s, want %s (reason %q, stderr %q)", r.Status, tc.want, r.Reason, r.StderrTail)
			}
			if !strings.Contains(r.Reason, tc.reason) || !strings.Contains(r.StderrTail, tc.stderr) {
				t.Errorf("reason %q / stderr %q, want %q / %q", r.Reason, r.StderrTail, tc.reason, tc.stderr)
			}
			if tc.name == "no network but loopback" && r.StderrTail != "lo\n" {
				t.Errorf("interfaces in sandbox: %q, want only lo", r.StderrTail)
			}
			assertNoLeftovers(t, marker)
		})
	}
	assertEmptyDir(t, e.Config().TempDir)
}

// A bwrap that is installed but cannot create namespaces (as in containers
// without user namespaces) must fail the constructor with its own message.
func TestBwrapProbeFailure(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "bwrap")
	script := "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := NewCommandExecutor(CommandConfig{Argv: []string{"true"}, Config: jail.Config{UseBwrap: true, BwrapPath: fake, RunAs: stageRunAs(), AllowWeakContainment: true}})
	if !errors.Is(err, jail.ErrBwrapUnusable) {
		t.Fatalf("err = %v, want jail.ErrBwrapUnusable", err)
	}
	if !strings.Contains(err.Error(), "No permissions to create new namespace") || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("error does not carry the probe's diagnosis: %v", err)
	}
}
