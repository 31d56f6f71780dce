package jail

import (
	"cmp"
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

// supported: the jail is built from Linux mechanisms.
const supported = true

const (
	sigKill = syscall.SIGKILL
	sigXCPU = syscall.SIGXCPU
)

// runProcess starts the child as leader of a new process group inside the
// job's cell, enforces the wall-clock timeout by killing the cell, and —
// after the leader exits but before it is reaped — kills the cell again so
// that forked children cannot outlive the job. Waiting with WNOWAIT first
// keeps the leader a zombie while we kill, so its pid (the group id) cannot
// be recycled under us.
func runProcess(ctx context.Context, s runSpec) (o Outcome) {
	o.ExitCode = -1
	cell := cmp.Or(s.cell, jobCell(pgroupCell{}))
	defer func() {
		if err := cell.release(); err != nil {
			o.CellErr = err
		}
	}()
	if err := ctx.Err(); err != nil {
		o.Canceled, o.CancelCause = true, context.Cause(ctx)
		return o
	}
	outR, outW, errR, errW, err := outputPipes()
	if err != nil {
		o.StartErr = err
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
		o.StartErr = err
		return o
	}

	start := time.Now()
	err = cmd.Start()
	if leave != nil {
		if lerr := leave(); lerr != nil {
			stuck = true
			o.CellErr = lerr
		}
	}
	outW.Close()
	errW.Close()
	if err != nil {
		o.StartErr = err
		return o
	}
	stdout, stderr := newTailBuffer(s.stdoutMax), newTailBuffer(s.stderrMax)
	var readers sync.WaitGroup
	readers.Go(func() { _, _ = io.Copy(stdout, outR) })
	readers.Go(func() { _, _ = io.Copy(stderr, errR) })

	awaitExit(ctx, s.timeout, cell, cmd.Process.Pid, &o)
	o.Duration = time.Since(start)
	cell.kill(cmd.Process.Pid)
	_ = cmd.Wait() // the outcome is read from ProcessState
	o.setStatus(cmd.ProcessState)
	o.PipeHeld = drain(&readers, s.grace, outR, errR)
	o.OOMKills = cell.oomKills()
	o.PidsRefused = cell.pidsRefused()
	o.Stdout = stdout.Bytes()
	o.Stderr = stderr.Bytes()
	return o
}

// outputPipes returns the pipes of the child's stdout and stderr.
func outputPipes() (outR, outW, errR, errW *os.File, err error) {
	if outR, outW, err = os.Pipe(); err != nil {
		return nil, nil, nil, nil, err
	}
	if errR, errW, err = os.Pipe(); err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, nil, nil, err
	}
	return outR, outW, errR, errW, nil
}

// awaitExit waits until the leader pid has exited (unreaped), killing the cell at the timeout or
// when ctx ends.
func awaitExit(ctx context.Context, timeout time.Duration, cell jobCell, pid int, o *Outcome) {
	exited := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exited)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		select {
		case <-exited: // exited at the same moment: not a timeout
		default:
			o.TimedOut = true
			cell.kill(pid)
			<-exited
		}
	case <-ctx.Done():
		o.Canceled, o.CancelCause = true, context.Cause(ctx)
		cell.kill(pid)
		<-exited
	}
}

// setStatus records how the reaped process ended.
func (o *Outcome) setStatus(ps *os.ProcessState) {
	if ps == nil {
		o.StartErr = errors.New("sandbox: process state unavailable after wait")
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			o.Signaled, o.Signal = true, ws.Signal()
		case ws.Exited():
			o.ExitCode = ws.ExitStatus()
		}
	}
	o.CPU = ps.UserTime() + ps.SystemTime()
}

// drain waits for the pipe readers. A process that left our group (setsid) still holds the pipe:
// after grace, reading stops rather than wait for it, and drain reports the pipe held.
func drain(readers *sync.WaitGroup, grace time.Duration, pipes ...*os.File) (held bool) {
	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(grace):
		for _, p := range pipes {
			_ = p.SetReadDeadline(time.Now())
		}
		<-drained
		return true
	}
	return false
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

// SignalName is the signal's name as a reason says it (SIGKILL).
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// SignalHint is what a death by s usually means in a jail, for a reason.
func SignalHint(s syscall.Signal) string {
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
func bwrapSignal(code int) (syscall.Signal, bool) {
	if code > 128 && code < 128+65 {
		return syscall.Signal(code - 128), true
	}
	return 0, false
}
