package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wmrl/wmrl/internal/retry"
)

// probePatience bounds the start-up probes that fail with EAGAIN: the job uid is at its
// RLIMIT_NPROC (the kernel counts every process of that uid on the host, other stages' and other
// programs' included), which frees up as those processes exit, so a stage started next to a burst
// of jobs waits for it rather than refusing to start. The probes are spaced by retry.Backoff.
var probePatience = 15 * time.Second

// errProbeEAGAIN marks a probe whose bwrap could not clone: "Resource temporarily unavailable".
var errProbeEAGAIN = errors.New("the job uid has no process to spare")

func (j *Jail) probeBwrapPatiently() error {
	ctx, cancel := context.WithTimeout(context.Background(), probePatience)
	defer cancel()
	var last error
	_, err := retry.Forever(ctx, retry.Backoff{Base: time.Second, Max: 8 * time.Second}.New(), func() error {
		if last = j.probeBwrap(); last != nil && !errors.Is(last, errProbeEAGAIN) {
			return retry.Permanent(last)
		}
		return last
	}, func(_ int, err error, wait time.Duration) {
		j.cfg.Logger.Warn("sandbox: bwrap probe could not create a namespace (EAGAIN); trying again", "err", err, "wait", wait)
	})
	if err != nil && last != nil {
		return last // the probe's own error, not the patience running out
	}
	return err
}

// probeBwrap runs /bin/true through exactly the wrapper real jobs use, because
// an installed bwrap often cannot create namespaces (containers without user
// namespaces, restrictive AppArmor) and that must be a startup error.
func (j *Jail) probeBwrap() error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("%w: no true(1) to probe with: %w", ErrBwrapUnusable, err)
	}
	dir, err := os.MkdirTemp(j.cfg.TempDir, "wmrl-bwrap-probe-")
	if err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	defer os.RemoveAll(dir)
	files := []File{{Name: "probe", Data: []byte("probe"), Mode: 0o600}}
	// Slot 0's uid: a RunAsRange's uids differ only in number, and
	// checkReachable has checked each.
	ra, err := j.runAs(0)
	if err != nil {
		return err
	}
	if err := j.prepareDir(dir, files, ra); err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	fds, err := j.jailFiles(dir, files)
	if err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	defer closeAll(fds)
	cell, err := j.contain.newCell(j.cfg.Limits)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBwrapUnusable, err)
	}
	o := runProcess(context.Background(), runSpec{
		cell:      cell,
		files:     fds,
		argv:      j.command(dir, files, []string{truePath}),
		dir:       j.startDir(dir),
		env:       []string{"HOME=" + dir, "PATH=" + DefaultPath, "TMPDIR=" + dir},
		runAs:     ra,
		timeout:   10 * time.Second,
		stdoutMax: 4 << 10,
		stderrMax: 4 << 10,
		grace:     j.cfg.KillGrace,
	})
	var what string
	switch {
	case o.StartErr != nil:
		what = o.StartErr.Error()
	case o.TimedOut:
		what = "timed out after 10s"
	case o.Signaled:
		what = "killed by " + SignalName(o.Signal)
	case o.ExitCode != 0:
		what = fmt.Sprintf("exit status %d", o.ExitCode)
	default:
		return nil
	}
	uid, id := "the stage's uid", os.Getuid()
	if ra != nil {
		uid, id = fmt.Sprintf("uid %d", ra.UID), int(ra.UID)
	}
	stderr := strings.TrimSpace(strings.ToValidUTF8(string(o.Stderr), "\uFFFD"))
	if strings.Contains(stderr, "Resource temporarily unavailable") || errors.Is(o.StartErr, syscall.EAGAIN) {
		// The jail's bwrap runs under the stage's RLIMIT_NPROC (the job's own applies inside it).
		return fmt.Errorf("%w: probe %q as %s: %s: %s: %w (it has %s processes on this host, and the stage's RLIMIT_NPROC, which the jail inherits, is %s; give the jobs uids of their own with --run-as or --run-as-range)",
			ErrBwrapUnusable, j.cfg.BwrapPath, uid, what, stderr, errProbeEAGAIN, countUIDProcs(id), stageNproc())
	}
	return fmt.Errorf("%w: probe %q as %s: %s: %s (the jail needs user namespaces for that uid; see docs/security.md)",
		ErrBwrapUnusable, j.cfg.BwrapPath, uid, what, stderr)
}

// countUIDProcs counts the processes whose real uid is uid, from /proc ("?" where it cannot).
func countUIDProcs(uid int) string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return "?"
	}
	want, n := fmt.Sprintf("Uid:\t%d\t", uid), 0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err == nil && strings.Contains(string(b), want) {
			n++
		}
	}
	return fmt.Sprint(n)
}
