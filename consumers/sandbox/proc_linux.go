package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const commandSupported = true

type signal = syscall.Signal

const (
	sigKill = syscall.SIGKILL
	sigXCPU = syscall.SIGXCPU
)

// runSpec is one fully prepared child process.
type runSpec struct {
	argv      []string
	dir       string
	env       []string
	runAs     *RunAs
	timeout   time.Duration
	stdoutMax int
	stderrMax int
	grace     time.Duration
	// cell holds the job's processes together (nil: process group only).
	cell jobCell
	// files become the child's descriptors 3, 4, … (the jail's --file inputs).
	files []*os.File
}

// procOutcome is what happened to the child, before classification.
type procOutcome struct {
	startErr    error
	timedOut    bool
	canceled    bool
	cancelCause error
	signaled    bool
	signal      signal
	exitCode    int
	cpu         time.Duration
	duration    time.Duration
	stdout      []byte
	stderr      []byte
	pipeHeld    bool
	oomKills    int   // processes the kernel OOM-killed in the job's cgroup
	cellErr     error // the containment could not be cleaned up
}

// runProcess starts the child as leader of a new process group inside the
// job's cell, enforces the wall-clock timeout by killing the cell, and —
// after the leader exits but before it is reaped — kills the cell again so
// that forked children cannot outlive the job. Waiting with WNOWAIT first
// keeps the leader a zombie while we kill, so its pid (the group id) cannot
// be recycled under us.
func runProcess(ctx context.Context, s runSpec) (o procOutcome) {
	o.exitCode = -1
	cell := s.cell
	if cell == nil {
		cell = pgroupCell{}
	}
	defer func() {
		if err := cell.release(); err != nil {
			o.cellErr = err
		}
	}()
	if err := ctx.Err(); err != nil {
		o.canceled, o.cancelCause = true, context.Cause(ctx)
		return o
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		o.startErr = err
		return o
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		o.startErr = err
		return o
	}
	defer outR.Close()
	defer errR.Close()

	cmd := &exec.Cmd{Path: s.argv[0], Args: s.argv, Dir: s.dir, Env: s.env, Stdout: outW, Stderr: errW, ExtraFiles: s.files}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If this process dies, the child dies too. Pdeathsig fires when the
		// forking *thread* exits, hence the LockOSThread below.
		Pdeathsig: syscall.SIGKILL,
	}
	if s.runAs != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: s.runAs.UID, Gid: s.runAs.GID, Groups: []uint32{}}
	}
	runtime.LockOSThread()
	// A thread that could not leave a job cgroup stays locked, so the
	// runtime never schedules other work on it.
	stuck := false
	defer func() {
		if !stuck {
			runtime.UnlockOSThread()
		}
	}()
	leave, err := cell.enter(cmd.SysProcAttr)
	if err != nil {
		outW.Close()
		errW.Close()
		o.startErr = err
		return o
	}

	start := time.Now()
	err = cmd.Start()
	if leave != nil {
		if lerr := leave(); lerr != nil {
			stuck = true
			o.cellErr = lerr
		}
	}
	outW.Close()
	errW.Close()
	if err != nil {
		o.startErr = err
		return o
	}
	stdout, stderr := newTailBuffer(s.stdoutMax), newTailBuffer(s.stderrMax)
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(stderr, errR) })

	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exited)
	}()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		select {
		case <-exited: // exited at the same moment: not a timeout
		default:
			o.timedOut = true
			cell.kill(pid)
			<-exited
		}
	case <-ctx.Done():
		o.canceled, o.cancelCause = true, context.Cause(ctx)
		cell.kill(pid)
		<-exited
	}
	o.duration = time.Since(start)
	cell.kill(pid)
	_ = cmd.Wait() // the outcome is read from ProcessState below
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				o.signaled, o.signal = true, ws.Signal()
			case ws.Exited():
				o.exitCode = ws.ExitStatus()
			}
		}
		o.cpu = ps.UserTime() + ps.SystemTime()
	} else {
		o.startErr = errors.New("sandbox: process state unavailable after wait")
	}

	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(s.grace):
		// A process that left our group (setsid) still holds the pipe;
		// stop reading rather than wait for it.
		o.pipeHeld = true
		_ = outR.SetReadDeadline(time.Now())
		_ = errR.SetReadDeadline(time.Now())
		<-drained
	}
	o.oomKills = cell.oomKills()
	o.stdout = stdout.Bytes()
	o.stderr = stderr.Bytes()
	return o
}

// waitExited blocks until pid has exited without reaping it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// killGroup SIGKILLs every process in the group led by pid.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

func signalName(s signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

func signalHint(s signal) string {
	switch s {
	case syscall.SIGKILL:
		return " (hard CPU limit, OOM killer or external kill)"
	case syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGBUS:
		return " (crash; under an address-space limit often a failed allocation)"
	case syscall.SIGXFSZ:
		return " (file size limit exceeded)"
	}
	return ""
}

// bwrapSignal decodes bubblewrap's exit status for a child killed by a
// signal (128+n). A program that itself exits 128+n is indistinguishable.
func bwrapSignal(code int) (signal, bool) {
	if code > 128 && code < 128+65 {
		return signal(code - 128), true
	}
	return 0, false
}
