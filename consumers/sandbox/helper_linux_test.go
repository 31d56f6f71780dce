package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// The test binary doubles as the untrusted program (GO_WANT_HELPER_PROCESS
// re-exec pattern), so each misbehaviour is precise and needs no toolchain
// other than Go.
const helperEnv = "GO_WANT_HELPER_PROCESS"

// spinSink gives the "spin" helper's busy loop a side effect.
var spinSink uint64

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	if base := os.Getenv(hostileStageEnv); base != "" {
		os.Exit(hostileStageMain(base))
	}
	if base := os.Getenv(gradeStageEnv); base != "" {
		os.Exit(gradeStageMain(base))
	}
	code := m.Run()
	if left := leftoverJobCgroups(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "job cgroups not removed: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

// leftoverJobCgroups lists this process's job cgroups still present.
func leftoverJobCgroups() []string {
	homes, _ := jail.CgroupHomes()
	var left []string
	for _, dir := range homes {
		m, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("wmrl-%d-*", os.Getpid())))
		left = append(left, m...)
	}
	return left
}

// helperInspect is what the "inspect" mode reports on stderr.
type helperInspect struct {
	Cwd      string
	CwdMode  uint32
	Env      []string
	Artifact string
	Pgid     int
	Pid      int
}

func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no mode")
		return 100
	}
	self, _ := os.Executable()
	switch args[0] {
	case "run":
		// The artifact names the behaviour, so one executor config can run
		// a mix of well- and ill-behaved rollouts.
		b, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 100
		}
		return helperMain(append(strings.Fields(string(b)), args[1]))
	case "attack":
		return hostileAttack(args[1:])
	case "good":
		fmt.Println("training... epoch 1")
		fmt.Println("")
		fmt.Println(`{"score": 0.75}`)
		fmt.Println("   ")
	case "spin":
		for {
			spinSink++
		}
	case "sleep":
		time.Sleep(time.Hour)
	case "fork":
		// Start a grandchild that would sleep for an hour, report its pid,
		// then exit successfully without waiting for it.
		c := exec.Command(self, "sleep")
		c.Env = os.Environ()
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fork:", err)
			return 101
		}
		fmt.Fprintf(os.Stderr, "grandchild=%d\n", c.Process.Pid)
		fmt.Println(`{"score": 0.5}`)
	case "fork-sleep":
		c := exec.Command(self, "sleep")
		c.Env = os.Environ()
		if err := c.Start(); err != nil {
			return 101
		}
		fmt.Fprintf(os.Stderr, "grandchild=%d\n", c.Process.Pid)
		time.Sleep(time.Hour)
	case "escape":
		// The grandchild leaves the process group with setsid and keeps
		// stdout open: the case a bare process group cannot contain.
		c := exec.Command(self, "sleep")
		c.Env = os.Environ()
		c.Stdout = os.Stdout
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			return 101
		}
		fmt.Fprintf(os.Stderr, "grandchild=%d\n", c.Process.Pid)
		fmt.Println(`{"score": 0.5}`)
	case "hostile":
		// hostile PORT MIB: everything a job should not get away with, in
		// order — a plain child, a setsid + double-fork escapee, a loopback
		// connection to the test's listener, then MIB MiB of memory.
		child := exec.Command(self, "sleep")
		child.Env = os.Environ()
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "hostile: fork:", err)
			return 101
		}
		// The middle process (new session) starts the escapee and exits at
		// once, so the escapee is orphaned outside our session and group.
		mid := exec.Command(self, "spawn-escapee")
		mid.Env, mid.Stderr = os.Environ(), os.Stderr
		mid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := mid.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "hostile: setsid:", err)
			return 102
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+args[1], 2*time.Second)
		if err != nil {
			fmt.Fprintf(os.Stderr, "net=refused (%v)\n", err)
		} else {
			conn.Close()
			fmt.Fprintln(os.Stderr, "net=connected")
		}
		n, _ := strconv.Atoi(args[2])
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(`{"score": 0}`)
	case "escape-sleep":
		mid := exec.Command(self, "spawn-escapee")
		mid.Env, mid.Stderr = os.Environ(), os.Stderr
		mid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := mid.Run(); err != nil {
			return 102
		}
		time.Sleep(time.Hour)
	case "spawn-escapee":
		c := exec.Command(self, "sleep")
		c.Env = os.Environ()
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn-escapee:", err)
			return 103
		}
		sid, _ := unix.Getsid(c.Process.Pid)
		fmt.Fprintf(os.Stderr, "escapee=%d sid=%d\n", c.Process.Pid, sid)
	case "alloc":
		n, _ := strconv.Atoi(args[1])
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(`{"score": 0}`)
	case "selfkill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "garbage":
		fmt.Println("the model looks great!")
	case "range":
		fmt.Println(`{"score": 1.5}`)
	case "fail":
		fmt.Fprintln(os.Stderr, strings.Repeat("x", 10000))
		fmt.Fprintln(os.Stderr, "boom: training diverged")
		return 3
	case "flood":
		line := bytes.Repeat([]byte("y"), 1023)
		line = append(line, '\n')
		for range 1024 {
			os.Stdout.Write(line)
		}
		fmt.Println(`{"score": 0.25}`)
	case "inspect":
		cwd, _ := os.Getwd()
		st, _ := os.Stat(cwd)
		art, _ := os.ReadFile(args[len(args)-1])
		json.NewEncoder(os.Stderr).Encode(helperInspect{
			Cwd: cwd, CwdMode: uint32(st.Mode().Perm()), Env: os.Environ(),
			Artifact: string(art), Pgid: syscall.Getpgrp(), Pid: os.Getpid(),
		})
		fmt.Println(`{"score": 1}`)
	case "write":
		n, _ := strconv.Atoi(args[1])
		if err := os.WriteFile("out.bin", make([]byte, n<<20), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			return 4
		}
		fmt.Println(`{"score": 0}`)
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", args[0])
		return 100
	}
	return 0
}

// helperPath is the absolute path of this test binary.
func helperPath(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// markerEnv returns a unique marker for the processes of one test.
func markerEnv(t testing.TB) (key, value string) {
	return "WMRL_TEST_MARKER", fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), time.Now().UnixNano())
}

// markedProcs lists live (non-zombie) processes whose environment carries
// the marker.
func markedProcs(marker string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	needle := []byte("WMRL_TEST_MARKER=" + marker + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		if procAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procAlive reports whether pid exists and is not a zombie (a zombie still
// answers kill -0 but can do no harm).
func procAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// assertNoLeftovers fails if any marked process is still alive shortly after
// the job returned (SIGKILL delivery is asynchronous, so allow a moment).
func assertNoLeftovers(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		pids := markedProcs(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes left behind: %v", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grandchildPid extracts "grandchild=N" from a stderr tail.
func grandchildPid(t *testing.T, stderr string) int {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if v, ok := strings.CutPrefix(l, "grandchild="); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("bad grandchild line %q", l)
			}
			return pid
		}
	}
	t.Fatalf("no grandchild pid in stderr %q", stderr)
	return 0
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
