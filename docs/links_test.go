// Package docs holds the user documentation; its test checks that every relative link in the
// README and in docs/ points at a file that exists, and at a heading that exists when it names
// one (#anchor), so the docs never send a reader to a missing file.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is an inline Markdown link or image: [text](target) or ![alt](target "title").
	mdLink  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
	inline  = regexp.MustCompile("`[^`\n]*`")
)

// slug is GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped,
// spaces to '-'.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(inline.ReplaceAllStringFunc(h, func(s string) string { return strings.Trim(s, "`") })))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// TestRelativeLinksResolve walks README.md, python/README.md and docs/*.md.
func TestRelativeLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "python", "README.md"))
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := inline.ReplaceAllString(fence.ReplaceAllString(string(b), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := f
			if file != "" {
				path = filepath.Join(filepath.Dir(f), filepath.FromSlash(file))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", f, target, path, anchor)
			}
		}
	}
	if links < 10 {
		t.Errorf("only %d relative links found; the link pattern is broken", links)
	}
}

func TestSlug(t *testing.T) {
	tests := map[string]string{
		"Scoring failures are loud":            "scoring-failures-are-loud",
		"Point `wmrl worldmodel` at vLLM":      "point-wmrl-worldmodel-at-vllm",
		"Staleness bound: `--max-steps-ahead`": "staleness-bound---max-steps-ahead",
	}
	for in, want := range tests {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
