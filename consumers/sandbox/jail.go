package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The jail side of CommandExecutor: how a job's files reach it and how the
// jail is probed at start-up (the bwrap command line is in bwrap_linux.go).

// jobFile is a file the job finds in its directory.
type jobFile struct {
	name string
	data []byte
	mode os.FileMode
}

// prepareDir writes the job's files into its host directory (0700 from
// MkdirTemp). Without the jail the job works there, so it is chowned to
// RunAs; in the jail the files are copied into the job's own tmpfs from
// descriptors (openJobFiles) and the host directory stays the stage's.
func (e *CommandExecutor) prepareDir(dir string, files []jobFile) ([]jobFile, error) {
	for _, f := range files {
		// 0700 for the artifact: it may be executed directly ({artifact} as argv[0]).
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return nil, fmt.Errorf("sandbox: write %s: %w", f.name, err)
		}
	}
	if e.cfg.RunAs != nil && !e.cfg.UseBwrap {
		paths := []string{dir}
		for _, f := range files {
			paths = append(paths, filepath.Join(dir, f.name))
		}
		for _, p := range paths {
			if err := os.Chown(p, int(e.cfg.RunAs.UID), int(e.cfg.RunAs.GID)); err != nil {
				return nil, fmt.Errorf("sandbox: chown job dir: %w", err)
			}
		}
	}
	return files, nil
}

// openJobFiles opens the job's files for bubblewrap's --file, in order.
func openJobFiles(dir string, files []jobFile) ([]*os.File, error) {
	var fds []*os.File
	for _, f := range files {
		fd, err := os.Open(filepath.Join(dir, f.name))
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("sandbox: open %s: %w", f.name, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// absArgs are the argv elements that name existing host files (the program,
// its script), which the job's uid must be able to read.
func absArgs(argv []string) []string {
	var out []string
	for _, a := range argv {
		if !filepath.IsAbs(a) || strings.Contains(a, "{") {
			continue
		}
		if st, err := os.Stat(a); err == nil && !st.IsDir() {
			out = append(out, a)
		}
	}
	return out
}

// startDir is where the child starts: the job directory, or / for the
// jail, whose (possibly dropped) uid may not enter the stage's host copy of
// the directory; bwrap --chdir then moves into the job's tmpfs.
func (e *CommandExecutor) startDir(dir string) string {
	if e.cfg.UseBwrap {
		return "/"
	}
	return dir
}

// jailSpec is the jail of a job working in dir.
func (e *CommandExecutor) jailSpec(dir string, files []jobFile) jailSpec {
	s := jailSpec{bwrap: e.cfg.BwrapPath, dir: dir, tmpfsBytes: e.cfg.JobDirBytes,
		allowNetwork: e.cfg.AllowNetwork, readOnly: e.readOnly}
	for _, f := range files {
		s.files, s.modes = append(s.files, f.name), append(s.modes, f.mode)
	}
	return s
}

// probeBwrap runs /bin/true through exactly the wrapper real jobs use, because
// an installed bwrap often cannot create namespaces (containers without user
// namespaces, restrictive AppArmor) and that must be a startup error.
func (e *CommandExecutor) probeBwrap() error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("%w: no true(1) to probe with: %w", ErrBwrapUnusable, err)
	}
	dir, err := os.MkdirTemp(e.cfg.TempDir, "wmrl-bwrap-probe-")
	if err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	defer os.RemoveAll(dir)
	files, err := e.prepareDir(dir, []jobFile{{name: "probe", data: []byte("probe"), mode: 0o600}})
	if err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	fds, err := openJobFiles(dir, files)
	if err != nil {
		return fmt.Errorf("%w: probe dir: %w", ErrBwrapUnusable, err)
	}
	defer closeAll(fds)
	argv := append(slices.Clone(e.prefix), jailArgs(e.jailSpec(dir, files))...)
	probeEnv, err := e.environ(placeholders{dir: dir, artifact: dir})
	if err != nil {
		// Only {meta.KEY} can fail, and the probe has no rollout: probe with the base environment.
		probeEnv = []string{"PATH=" + DefaultPath, "HOME=" + dir, "TMPDIR=" + dir}
	}
	cell, err := e.contain.newCell(e.cfg.Limits)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBwrapUnusable, err)
	}
	o := runProcess(context.Background(), runSpec{
		cell:      cell,
		files:     fds,
		argv:      append(argv, truePath),
		dir:       e.startDir(dir),
		env:       probeEnv,
		runAs:     e.cfg.RunAs,
		timeout:   10 * time.Second,
		stdoutMax: 4 << 10,
		stderrMax: 4 << 10,
		grace:     e.cfg.KillGrace,
	})
	var what string
	switch {
	case o.startErr != nil:
		what = o.startErr.Error()
	case o.timedOut:
		what = "timed out after 10s"
	case o.signaled:
		what = "killed by " + signalName(o.signal)
	case o.exitCode != 0:
		what = fmt.Sprintf("exit status %d", o.exitCode)
	default:
		return nil
	}
	uid := "the stage's uid"
	if e.cfg.RunAs != nil {
		uid = fmt.Sprintf("uid %d", e.cfg.RunAs.UID)
	}
	return fmt.Errorf("%w: probe %q as %s: %s: %s (the jail needs user namespaces for that uid; see docs/security.md)",
		ErrBwrapUnusable, e.cfg.BwrapPath, uid, what, strings.TrimSpace(validUTF8(o.stderr)))
}
