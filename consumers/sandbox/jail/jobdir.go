package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// prepareDir writes the job's files into its host directory (0700 from
// MkdirTemp). Without the jail the job works there, so it is chowned to
// RunAs; in the jail the files are copied into the job's own tmpfs from
// descriptors (openJobFiles) and the host directory stays the stage's.
func (j *Jail) prepareDir(dir string, files []File, ra *RunAs) error {
	paths := []string{dir}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		// A name may be nested (the grade step's run/out/…): its directories first.
		for d := filepath.Dir(p); d != dir; d = filepath.Dir(d) {
			paths = append(paths, d)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("sandbox: write %s: %w", f.Name, err)
		}
		// 0700 for the artifact: it may be executed directly ({artifact} as argv[0]).
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			return fmt.Errorf("sandbox: write %s: %w", f.Name, err)
		}
		paths = append(paths, p)
	}
	if ra != nil && !j.cfg.UseBwrap {
		for _, p := range paths {
			if err := os.Chown(p, int(ra.UID), int(ra.GID)); err != nil {
				return fmt.Errorf("sandbox: chown job dir: %w", err)
			}
		}
	}
	return nil
}

// openJobFiles opens the job's files for bubblewrap's --file, in order.
func openJobFiles(dir string, files []File) ([]*os.File, error) {
	var fds []*os.File
	for _, f := range files {
		fd, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("sandbox: open %s: %w", f.Name, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// jailFiles are the descriptors bwrap gets from jailFD on: the job's files,
// then the seccomp filter (jailSpec numbers them the same way).
func (j *Jail) jailFiles(dir string, files []File) ([]*os.File, error) {
	fds, err := openJobFiles(dir, files)
	if err != nil || j.seccomp == nil {
		return fds, err
	}
	f, err := j.seccomp.file()
	if err != nil {
		closeAll(fds)
		return nil, err
	}
	return append(fds, f), nil
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
func (j *Jail) startDir(dir string) string {
	if j.cfg.UseBwrap {
		return "/"
	}
	return dir
}

// jailSpec is the jail of a job working in dir.
func (j *Jail) jailSpec(dir string, files []File) jailSpec {
	s := jailSpec{bwrap: j.cfg.BwrapPath, dir: dir, tmpfsBytes: j.cfg.JobDirBytes,
		allowNetwork: j.cfg.AllowNetwork, readOnly: j.readOnly, noProc: j.cfg.Proc == ProcNone}
	for _, f := range files {
		s.files, s.modes = append(s.files, f.Name), append(s.modes, f.Mode)
	}
	if j.seccomp != nil {
		s.seccompFD = jailFD + len(files)
	}
	s.usernsOpen = j.usernsOpen
	return s
}
