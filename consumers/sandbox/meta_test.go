package sandbox

import (
	"errors"
	"testing"
)

func TestPlaceholdersExpand(t *testing.T) {
	p := placeholders{dir: "/j", artifact: "/j/a.py", rollout: "r-1",
		meta: map[string]string{"label": "42", "tests": "add", "odd": "{dir}", "": "empty"}}
	tests := []struct {
		in, want string
		err      error
	}{
		{"plain", "plain", nil},
		{"{artifact}", "/j/a.py", nil},
		{"{dir}/rollout.json", "/j/rollout.json", nil},
		{"--label={meta.label}", "--label=42", nil},
		{"/tasks/{meta.tests}/test_{meta.tests}.py", "/tasks/add/test_add.py", nil},
		// A meta value is data: a placeholder inside it stays literal.
		{"{meta.odd}", "{dir}", nil},
		{"{meta.}", "{meta.}", nil},
		{"{meta.label", "{meta.label", nil},
		{"{other} {", "{other} {", nil},
		{"{meta.missing}", "", ErrMissingMeta},
	}
	for _, tc := range tests {
		got, err := p.expand(tc.in)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("expand(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	_, err := p.expand("{meta.missing}")
	if want := `sandbox: meta key missing: rollout "r-1" has no meta key "missing" (named by {meta.missing} in the command line or environment)`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestCheckMetaPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"{meta.label}", true},
		{"x{meta.a}y{meta.b}", true},
		{"no placeholder", true},
		{"{meta.}", false},
		{"{meta.label", false},
		{"{meta.a}{meta.", false},
	} {
		err := checkMetaPlaceholders("--argv", tc.in)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("checkMetaPlaceholders(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}
