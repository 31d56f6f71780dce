package sandbox

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// tarOf builds a run step stream: entries are name=content (a trailing / is a
// directory, "->" a symlink).
func tarOf(t *testing.T, entries ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range entries {
		name, content, _ := strings.Cut(e, "=")
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		switch {
		case strings.HasSuffix(name, "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		case strings.HasPrefix(content, "->"):
			h.Typeflag, h.Linkname, h.Size, content = tar.TypeSymlink, content[2:], 0, ""
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The run step's stream is the solution's data: only its stdout, exit status and regular files
// under out/ reach the grade step, under run/, and nothing it names can land elsewhere.
func TestRunOutputs(t *testing.T) {
	many := []string{".wmrl-run/stdout=s"}
	for i := range maxRunOutputFile + 5 {
		many = append(many, fmt.Sprintf("out/f%d=x", i))
	}
	tests := []struct {
		name    string
		stream  []byte
		files   []string // name=content, in order
		problem string   // substring of the problems, "" for none
	}{
		{"collector's layout", tarOf(t, ".wmrl-run/stdout=42\n", ".wmrl-run/exit=0\n", "out/", "out/case/a.stdout=5"),
			[]string{"run/stdout=42\n", "run/exit_status=0\n", "run/out/case/a.stdout=5"}, ""},
		{"leading ./", tarOf(t, ".wmrl-run/exit=0", "./out/x=1"), []string{"run/exit_status=0", "run/out/x=1"}, ""},
		{"outside out/ and traversal dropped", tarOf(t, ".wmrl-run/exit=0", "rollout.json=fake", "out/../rollout.json=fake", "../x=1", "/etc/passwd=1", "out/./x=1", ".wmrl-run/other=1", "out/ok=1"),
			[]string{"run/exit_status=0", "run/out/ok=1"}, "6 entr(ies) of the run step's outputs dropped"},
		{"symlink dropped", tarOf(t, "out/link=->/etc/passwd", "out/ok=1"), []string{"run/out/ok=1"}, "1 entr(ies)"},
		{"duplicate keeps the first", tarOf(t, ".wmrl-run/stdout=honest", ".wmrl-run/stdout=forged"), []string{"run/stdout=honest"}, "1 entr(ies)"},
		{"file then directory of the same name", tarOf(t, "out/a=1", "out/a/b=2"), []string{"run/out/a=1"}, "1 entr(ies)"},
		{"directory then file of the same name", tarOf(t, "out/a/b=2", "out/a=1"), []string{"run/out/a/b=2"}, "1 entr(ies)"},
		{"cut from the front", tarOf(t, "out/a="+strings.Repeat("x", 3000))[1024:], nil, "unreadable after 0 file(s)"},
		{"not a tar", []byte(`{"score": 1}`), nil, "unreadable"},
		{"collector killed", nil, nil, "reported no exit status"},
		{"no exit status", tarOf(t, ".wmrl-run/stdout=42"), []string{"run/stdout=42"}, "reported no exit status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, problems := runOutputs(tc.stream)
			var got []string
			for _, f := range files {
				if f.Mode != 0o444 {
					t.Errorf("%s: mode %o, want read-only", f.Name, f.Mode)
				}
				got = append(got, f.Name+"="+string(f.Data))
			}
			if strings.Join(got, "|") != strings.Join(tc.files, "|") {
				t.Errorf("files %q, want %q", got, tc.files)
			}
			p := strings.Join(problems, "; ")
			if (tc.problem == "") != (p == "") || !strings.Contains(p, tc.problem) {
				t.Errorf("problems %q, want %q", p, tc.problem)
			}
		})
	}
	t.Run("too many files", func(t *testing.T) {
		files, problems := runOutputs(tarOf(t, many...))
		if len(files) != maxRunOutputFile+2 || !strings.Contains(strings.Join(problems, ";"), fmt.Sprintf("more than %d files", maxRunOutputFile)) {
			t.Errorf("%d files, problems %q", len(files), problems)
		}
	})
}
