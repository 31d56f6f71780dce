package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Uids of the test's stage and of a process of another user when the test runs as root.
const (
	nobodyUID = 65534
	otherUID  = 65533
)

// TestStageEnvironHidden starts the real binary as a stage with credentials in its environment
// and reads its /proc/<pid>/environ from real child processes: one of the stage's uid and one of
// another uid must be refused, because the stage marks itself non-dumpable; root (CAP_SYS_PTRACE)
// still reads it, and finds the secrets there although the stage has unset them: Unsetenv does
// not clear the block the kernel set up at execve. A dumpable process of the same uid with the
// same environment is read by the same reader, so the refusal is the flag's doing. As non-root
// the test can only run the same-uid cases. The same binary first serves the start-up errors of
// bad credential files (testSecretFileExit).
func TestStageEnvironHidden(t *testing.T) {
	root := os.Geteuid() == 0
	stageUID := os.Getuid()
	if root {
		stageUID = nobodyUID
	}
	bin := publicBinary(t)
	t.Run("credential file errors", func(t *testing.T) { testSecretFileExit(t, bin) })
	password := fmt.Sprintf("sasl-s3cret-%d", time.Now().UnixNano())
	env := []string{"PATH=/usr/bin:/bin", "WMRL_SASL_PASSWORD=" + password, "WMRL_REDIS=redis://:redis-" + password + "@127.0.0.1:1/0"}

	// A broker that accepts and never answers: once the stage connects, its pre-run (credentials
	// read, environment scrubbed) is over and it waits out --startup-timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})

	stage := exec.Command(bin, "train", "--brokers", ln.Addr().String(), "--startup-timeout", "60s")
	stage.Env = env
	var stageErr bytes.Buffer
	stage.Stderr = &stageErr
	asUser(stage, stageUID)
	startOrFatal(t, stage)
	select {
	case <-accepted:
	case <-time.After(30 * time.Second):
		t.Fatalf("the stage never connected to the broker; stderr:\n%s", stageErr.String())
	}

	// The control: a dumpable process of the same uid with the same environment.
	control := exec.Command("sleep", "60")
	control.Env = env
	asUser(control, stageUID)
	startOrFatal(t, control)

	type reader struct {
		name     string
		uid      int
		pid      int
		readable bool
	}
	readers := []reader{
		{"stage, same uid", stageUID, stage.Process.Pid, false},
		{"control (dumpable), same uid", stageUID, control.Process.Pid, true},
	}
	if root {
		readers = append(readers,
			reader{"stage, other uid", otherUID, stage.Process.Pid, false},
			reader{"stage, root with CAP_SYS_PTRACE", 0, stage.Process.Pid, true},
		)
	}
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			cat := exec.Command("cat", fmt.Sprintf("/proc/%d/environ", r.pid))
			if r.uid != os.Getuid() {
				asUser(cat, r.uid)
			}
			var stderr bytes.Buffer
			cat.Stderr = &stderr
			out, err := cat.Output()
			switch {
			case r.readable && err != nil:
				t.Fatalf("uid %d could not read environ: %v: %s", r.uid, err, stderr.String())
			case r.readable && !strings.Contains(string(out), password):
				t.Fatalf("uid %d read environ without the secret (%d bytes); the test no longer sees the initial block", r.uid, len(out))
			case !r.readable && err == nil:
				t.Fatalf("uid %d read the stage's environ (%d bytes, secret included: %v)", r.uid, len(out), strings.Contains(string(out), password))
			case !r.readable && !strings.Contains(stderr.String(), "Permission denied"):
				t.Fatalf("uid %d: want permission denied, got %v: %s", r.uid, err, stderr.String())
			}
		})
	}
}

// testSecretFileExit runs the binary with bad credential files: each start fails with exit
// status 2 and exactly one line naming the option and the file, before any connection.
func testSecretFileExit(t *testing.T, bin string) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"missing sasl file", []string{"train", "--sasl-password-file", absent}, nil,
			"wmrl: --sasl-password-file " + absent + ": no such file or directory"},
		{"empty redis file", []string{"correct", "--redis-password-file", empty}, nil,
			"wmrl: --redis-password-file " + empty + ": file is empty"},
		{"value and file", []string{"worldmodel", "--model", "m", "--wm-api-key-file", empty}, []string{"WMRL_WM_API_KEY=k"},
			"wmrl: --wm-api-key-file " + empty + ": credential given twice: WMRL_WM_API_KEY is set too; give one of them"},
		{"file from env", []string{"generate", "--run-id", "r"}, []string{"WMRL_POLICY_API_KEY_FILE=" + absent},
			"wmrl: --policy-api-key-file " + absent + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(tt.args, "--brokers", "127.0.0.1:1", "--startup-timeout", "2s")...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if got := strings.TrimSuffix(stderr.String(), "\n"); code != 2 || got != tt.want {
				t.Fatalf("exit %d (%v), stderr %q; want exit 2 and %q", code, err, got, tt.want)
			}
		})
	}
}

// asUser runs cmd as uid (and the same gid) when it differs from the test's.
func asUser(cmd *exec.Cmd, uid int) {
	if uid == os.Getuid() {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
}

func startOrFatal(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// publicBinary builds wmrl into a directory every user may enter, so the stage can run as
// nobody; the build's temporary directories are private to the test's user.
func publicBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wmrl-public-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := buildWMRL(t, dir)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(bin)
}
