package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
	"github.com/wmrl/wmrl/internal/testenv"
)

// loopbackListener counts the connections a job manages to open to the host's
// loopback interface.
func loopbackListener(t *testing.T) (port string, accepted *atomic.Int64) {
	t.Helper()
	ln, port, accepted, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return port, accepted
}

// listenLoopback accepts and counts connections on a free port of 127.0.0.1
// until ln is closed.
func listenLoopback() (ln net.Listener, port string, accepted *atomic.Int64, err error) {
	if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, "", nil, err
	}
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return ln, port, accepted, nil
}

// availableContainments is what this host offers, probed independently of
// the auto choice so every available path is exercised.
func availableContainments(t *testing.T) map[jail.Containment]bool {
	t.Helper()
	out := map[jail.Containment]bool{}
	for _, c := range jail.Containments() {
		err := jail.Probe(c)
		out[c] = err == nil
		if err != nil && !errors.Is(err, jail.ErrContainmentUnavailable) {
			t.Fatalf("detect %s: %v", c, err)
		}
	}
	return out
}

// A job that forks, escapes with setsid and a double fork, connects to the
// host's loopback and allocates past its memory limit, under every
// containment this host offers, with and without bubblewrap. The guarantees
// asserted per path are the ones docs/security.md states.
func TestCommandExecutorHostileJob(t *testing.T) {
	avail := availableContainments(t)
	if testenv.Required() && !avail[jail.ContainmentCgroup] {
		// CI runs as root on a host with cgroups; without them the strong path is not tested.
		t.Fatalf("cgroup containment unavailable, its cases would not run")
	}
	_, bwrapErr := bwrapWorks(t)
	tests := []struct {
		containment jail.Containment
		bwrap       bool
		memory      uint64 // jail.Limits.MemoryBytes
		allocMiB    int
		escapeLives bool // the setsid escapee outlives the job (documented weakness)
	}{
		{containment: jail.ContainmentCgroup, memory: 256 << 20, allocMiB: 1024},
		{containment: jail.ContainmentCgroup, bwrap: true, memory: 256 << 20, allocMiB: 1024},
		// RLIMIT_AS fallback: the Go runtime needs room to start, so the limit is larger.
		{containment: jail.ContainmentPIDNamespace, memory: 2 << 30, allocMiB: 4096},
		{containment: jail.ContainmentPIDNamespace, bwrap: true, memory: 2 << 30, allocMiB: 4096},
		{containment: jail.ContainmentProcessGroup, memory: 2 << 30, allocMiB: 4096, escapeLives: true},
		{containment: jail.ContainmentProcessGroup, bwrap: true, memory: 2 << 30, allocMiB: 4096},
	}
	for _, tc := range tests {
		name := tc.containment.String()
		if tc.bwrap {
			name += "+bwrap"
		}
		t.Run(name, func(t *testing.T) {
			if !avail[tc.containment] {
				t.Skipf("%s not available on this host", tc.containment)
			}
			if tc.bwrap && bwrapErr != nil {
				testenv.SkipOrFail(t, "bwrap unusable: %v", bwrapErr)
			}
			memoryCgroup := tc.containment == jail.ContainmentCgroup
			if raceEnabled && !memoryCgroup {
				t.Skip("ThreadSanitizer cannot run under RLIMIT_AS, the memory fallback of this containment")
			}
			port, accepted := loopbackListener(t)
			_, marker := markerEnv(t)
			e := helperExec(t, marker, func(c *CommandConfig) {
				if tc.bwrap {
					c.Argv[0] = helperOutsideTmp(t)
				}
				c.Containment = tc.containment
				c.UseBwrap = tc.bwrap
				c.Limits = jail.Limits{MemoryBytes: tc.memory}
				c.StderrTail = 64 << 10
				c.KillGrace = 100 * time.Millisecond
			})
			if e.Config().Containment != tc.containment {
				t.Fatalf("containment %s, asked for %s", e.Config().Containment, tc.containment)
			}
			r := e.Execute(context.Background(), job(fmt.Sprintf("hostile %s %d", port, tc.allocMiB)))
			t.Logf("result: status=%s exit=%d oom=%v reason=%q", r.Status, r.ExitCode, r.OOMKilled(), r.Reason)
			stderr := r.StderrTail
			if !strings.Contains(stderr, "escapee=") {
				t.Fatalf("the escapee was not started, nothing was tested (stderr %q)", lastLines(stderr, 5))
			}

			// Network: bubblewrap's network namespace has its own loopback, so
			// the host's listener is unreachable; without it the job shares the
			// host's network, loopback included.
			if tc.bwrap {
				if !strings.Contains(stderr, "net=refused") || accepted.Load() != 0 {
					t.Errorf("job under bwrap reached the host's loopback (accepted %d, stderr %q)", accepted.Load(), lastLines(stderr, 5))
				}
			} else if !strings.Contains(stderr, "net=connected") || !eventually(func() bool { return accepted.Load() == 1 }) {
				t.Errorf("without bwrap the host's loopback should be reachable (accepted %d, stderr %q)", accepted.Load(), lastLines(stderr, 5))
			}

			// Memory: a cgroup limit is an OOM kill reported as such; the
			// RLIMIT_AS fallback makes the allocation fail inside the program.
			if r.Status != StatusError {
				t.Errorf("status %s, want error", r.Status)
			}
			if memoryCgroup {
				if !r.OOMKilled() || !strings.HasPrefix(r.Reason, "out of memory: job exceeded its memory limit of 268435456 bytes") {
					t.Errorf("want an OOM kill, got oom=%v reason %q", r.OOMKilled(), r.Reason)
				}
			} else if r.OOMKilled() || !strings.Contains(stderr, "out of memory") {
				t.Errorf("want the allocation to fail under RLIMIT_AS, got oom=%v reason %q stderr %q", r.OOMKilled(), r.Reason, lastLines(stderr, 3))
			}

			// Processes: nothing may survive, except the escapee of a bare
			// process group, which is the weakness this test documents.
			if tc.escapeLives {
				pid := escapeePid(t, stderr)
				if !procAlive(pid) {
					t.Errorf("escapee %d died; the process-group path is stronger than documented", pid)
				}
				_ = killPid(pid)
			}
			assertNoLeftovers(t, marker)
			assertEmptyDir(t, e.Config().TempDir)
		})
	}
}

// helperOutsideTmp copies the test binary to a directory outside /tmp, which
// bubblewrap replaces with an empty tmpfs: the user's cache directory, since the
// checkout itself may live under /tmp (a CI clone does).
func helperOutsideTmp(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, "wmrl-sandbox-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.ReadFile(helperPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := filepath.Abs(filepath.Join(dir, "helper"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// eventually polls cond for up to two seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func escapeePid(t *testing.T, stderr string) int {
	t.Helper()
	var pid, sid int
	for _, l := range strings.Split(stderr, "\n") {
		if _, err := fmt.Sscanf(l, "escapee=%d sid=%d", &pid, &sid); err == nil {
			return pid
		}
	}
	t.Fatalf("no escapee line in %q", stderr)
	return 0
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// The v1 kill path (no cgroup2 mount: SIGKILL to each listed process until
// the cgroup is empty) runs here with detection told to ignore cgroup2.
func TestCommandExecutorCgroupV1Only(t *testing.T) {
	if !availableContainments(t)[jail.ContainmentCgroup] {
		t.Skip("cgroup containment not available on this host")
	}
	port, _ := loopbackListener(t)
	_, marker := markerEnv(t)
	if _, err := jail.New(jail.Config{Containment: jail.ContainmentCgroup, CgroupV1Only: true, AllowWeakContainment: true}, nil); err != nil {
		t.Skipf("no cgroup v1 memory hierarchy here: %v", err)
	}
	e := helperExec(t, marker, func(c *CommandConfig) {
		c.Limits = jail.Limits{MemoryBytes: 256 << 20}
		c.StderrTail = 64 << 10
		c.Containment, c.CgroupV1Only = jail.ContainmentCgroup, true
	})
	for _, tc := range []struct {
		name, artifact string
		timeout        time.Duration
		want           Status
		oom            bool
	}{
		{name: "escapee and OOM", artifact: "hostile " + port + " 1024", timeout: 10 * time.Second, want: StatusError, oom: true},
		{name: "escapee at timeout", artifact: "escape-sleep", timeout: 500 * time.Millisecond, want: StatusTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.cfg.Timeout = tc.timeout
			r := e.Execute(context.Background(), job(tc.artifact))
			if r.Status != tc.want || r.OOMKilled() != tc.oom {
				t.Errorf("got %s oom=%v %q, want %s oom=%v", r.Status, r.OOMKilled(), r.Reason, tc.want, tc.oom)
			}
			if !strings.Contains(r.StderrTail, "escapee=") {
				t.Fatalf("escapee not started: %q", lastLines(r.StderrTail, 3))
			}
			assertNoLeftovers(t, marker)
		})
	}
}
