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
