package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// runOutputs turns the run step's stream (runCollector's tar archive on its
// stdout) into the grade step's files under GradeRunDir: the command's stdout
// and exit status, and the regular files of its output directory. Everything
// in it is written by the code being graded, so it is taken as data only:
// names are confined to run/out, anything but a regular file is dropped, a
// name that clashes with one already taken is dropped, and the count is
// bounded. problems says what was dropped or could not be read (the stream is
// cut from the front past RunOutputLimit, which leaves it unreadable); the
// grade step finds them in GradeErrorFile.
func runOutputs(stream []byte) (files []jail.File, problems []string) {
	tr := tar.NewReader(bytes.NewReader(stream))
	taken := map[string]bool{} // files and the directories above them
	dropped := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("the run step's outputs are unreadable after %d file(s) (more than the run output limit, or not written by the collector): %v", len(files), err))
			break
		}
		if h.Typeflag == tar.TypeDir {
			continue // made as the files under it need it
		}
		dest, ok := gradeName(h.Name)
		if !ok || h.Typeflag != tar.TypeReg {
			dropped++
			continue
		}
		if !claim(taken, dest) {
			dropped++
			continue
		}
		if len(files) == maxRunOutputFile+2 { // stdout and exit status, then out/
			problems = append(problems, fmt.Sprintf("more than %d files in %s/: the rest were dropped", maxRunOutputFile, RunOutDir))
			break
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("the run step's outputs are unreadable in %s: %v", h.Name, err))
			break
		}
		files = append(files, jail.File{Name: dest, Data: data, Mode: 0o444})
	}
	if !slices.ContainsFunc(files, func(f jail.File) bool { return f.Name == GradeExitFile }) && len(problems) == 0 {
		problems = append(problems, "the run step's collector reported no exit status: it did not run to its end (killed?)")
	}
	if dropped > 0 {
		problems = append(problems, fmt.Sprintf("%d entr(ies) of the run step's outputs dropped: not a regular file under %s/, or a name already taken", dropped, RunOutDir))
	}
	return files, problems
}

// gradeName maps a name of runCollector's archive to the grade step's: its
// stdout and exit files, or a file under out/ (at most 16 levels and 1 KiB
// deep, no "." or ".." component).
func gradeName(name string) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	switch name {
	case runCollectorDir + "/stdout":
		return GradeStdoutFile, true
	case runCollectorDir + "/exit":
		return GradeExitFile, true
	}
	rel, ok := strings.CutPrefix(strings.TrimSuffix(name, "/"), RunOutDir+"/")
	if !ok || rel == "" || len(rel) > 1024 || strings.ContainsRune(rel, 0) {
		return "", false
	}
	parts := strings.Split(rel, "/")
	if len(parts) > 16 {
		return "", false
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || len(p) > 255 {
			return "", false
		}
	}
	return path.Join(GradeOutDir, rel), true
}

// claim reserves name as a file: false when it is taken, or when it or one
// of its parents clashes with an earlier file or directory.
func claim(taken map[string]bool, name string) bool {
	if _, dup := taken[name]; dup {
		return false
	}
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if isFile, seen := taken[dir]; seen && isFile {
			return false
		}
	}
	taken[name] = true
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		taken[dir] = false
	}
	return true
}

// classify maps a step's outcome onto the four statuses: the program's
// last stdout line is the score.
func (e *CommandExecutor) classify(s *step, o jail.Outcome) Result {
	r, stopped := e.failure(s, o)
	if stopped {
		return r
	}
	switch {
	case o.Signaled:
		r.Status, r.Reason = StatusError, "killed by signal "+jail.SignalName(o.Signal)+jail.SignalHint(o.Signal)
		if e.cfg.UseBwrap {
			r.ExitCode = o.ExitCode
		}
	case o.ExitCode != 0:
		r.Status, r.ExitCode = StatusError, o.ExitCode
		r.Reason = fmt.Sprintf("exit status %d", o.ExitCode)
	default:
		r.ExitCode = 0
		score, err := e.rng.parse(o.Stdout)
		if err != nil {
			r.Status, r.Reason = StatusInvalid, err.Error()
		} else {
			r.Status, r.Score = StatusOK, score
		}
	}
	return withPipeHeld(r, o)
}

// failure classifies what ended a step other than its program's own exit:
// the host (setup, start), shutdown, and the budgets (memory, wall clock,
// CPU). stopped is false when the program ran to its own end; r then holds
// only the duration and stderr.
func (e *CommandExecutor) failure(s *step, o jail.Outcome) (r Result, stopped bool) {
	r = Result{
		Duration:   o.Duration,
		ExitCode:   -1,
		StderrTail: validUTF8(o.Stderr),
	}
	switch {
	case o.SetupErr != nil:
		r.Status, r.Reason = StatusError, o.SetupErr.Error()
	case o.StartErr != nil:
		r.Status, r.Reason = StatusError, fmt.Sprintf("sandbox: start: %v", o.StartErr)
	case o.Canceled:
		r.Status, r.Reason, r.canceled = StatusError, "canceled: "+o.CancelCause.Error(), true
	case o.OOMKills > 0:
		// Checked before the timeout: a job whose worker was OOM-killed
		// often hangs waiting for it, and the memory is the real cause.
		r.Status, r.oom = StatusError, true
		r.Reason = fmt.Sprintf("out of memory: job exceeded its memory limit of %d bytes (%d process(es) OOM-killed)", e.cfg.Limits.MemoryBytes, o.OOMKills)
	case o.Refused != "":
		// The host, not the rollout, decided this outcome: whatever the step
		// printed is no grade (an honest job whose subprocesses could not
		// start would be graded as failing). Before the timeout: a job that
		// cannot fork often hangs.
		r.Status, r.Reason = StatusError, "host refused a resource: "+o.Refused
	case o.TimedOut:
		r.Status, r.Reason = StatusTimeout, fmt.Sprintf("wall-clock timeout after %s: %s killed", s.timeout, s.jail.KillScope())
	case o.CPULimitHit:
		r.Status, r.Reason = StatusTimeout, fmt.Sprintf("cpu time limit %ds exceeded: killed by %s", e.cfg.Limits.CPUSeconds, jail.SignalName(o.Signal))
	default:
		return r, false
	}
	return withPipeHeld(r, o), true
}

func withPipeHeld(r Result, o jail.Outcome) Result {
	if o.PipeHeld {
		r.Reason = strings.TrimPrefix(r.Reason+"; output pipe held open by an escaped process", "; ")
	}
	return r
}
