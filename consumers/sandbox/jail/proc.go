package jail

import (
	"os"
	"syscall"
	"time"
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

// Outcome is what happened to the program, before the stage classifies it.
type Outcome struct {
	// SetupErr: the job's files or containment could not be prepared, so
	// nothing ran; StartErr: the process could not be started.
	SetupErr, StartErr error
	TimedOut           bool
	Canceled           bool
	CancelCause        error
	// Signaled and Signal are the signal that killed the program (under
	// bubblewrap decoded from its exit status 128+n, which a program that
	// itself exits 128+n cannot be told apart from).
	Signaled bool
	Signal   syscall.Signal
	// CPULimitHit attributes the signal death to Limits.CPUSeconds.
	CPULimitHit bool
	ExitCode    int
	CPU         time.Duration
	Duration    time.Duration
	Stdout      []byte
	Stderr      []byte
	// PipeHeld: a process that escaped the containment held the output
	// pipes open past KillGrace, and reading stopped.
	PipeHeld bool
	OOMKills int   // processes the kernel OOM-killed in the job's cgroup
	CellErr  error // the containment could not be cleaned up
	// PidsRefused counts the forks the kernel refused the job at its pids
	// cgroup's limit (pids.events "max").
	PidsRefused int
	// Refused says how the host refused the job a resource it needed (its
	// process limit was hit, or the jail could not be created for want of a
	// process), "" when it did not: such a job is an infrastructure error
	// whose output is no grade.
	Refused string
}
