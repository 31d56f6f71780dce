package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// pendingFlags are options the chart and docker-compose.yml already pass that the stages gain
// with issue 13 (static membership and session timeout on every consuming stage, a metrics and
// health server on every stage). The test reports them instead of failing, and fails once one
// exists, so the list only shrinks.
var pendingFlags = map[string][]string{}

// notFlags are environment variables the stages read that are not options.
var notFlags = map[string]bool{"WMRL_WM_API_KEY": true, "WMRL_POLICY_API_KEY": true}

var flagRE = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// TestStageFlagsExist builds the wmrl binary and checks that every option the chart and the
// Compose file give a stage (arguments, WMRL_* variables, config-file keys) is one that stage's
// `--help` lists: a misspelt or removed flag would make the pod crash-loop.
func TestStageFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the wmrl binary")
	}
	bin := filepath.Join(t.TempDir(), "wmrl")
	build := exec.Command("go", "build", "-o", bin, "./cmd/wmrl")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/wmrl: %v\n%s", err, out)
	}
	known := map[string]map[string]bool{}
	flagsOf := func(sub string) map[string]bool {
		if f, ok := known[sub]; ok {
			return f
		}
		out, err := exec.Command(bin, append(strings.Fields(sub), "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("wmrl %s --help: %v\n%s", sub, err, out)
		}
		f := map[string]bool{}
		for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
			f[m[1]] = true
		}
		known[sub] = f
		return f
	}
	type use struct{ where, sub, flag string }
	var uses []use
	for name, files := range valueSets {
		for _, m := range render(t, files) {
			switch m.Obj["kind"] {
			case "ConfigMap":
				if cfg, ok := dig(m.Obj, "data", "config.yaml").(string); ok {
					var keys map[string]any
					if err := yaml.Unmarshal([]byte(cfg), &keys); err != nil {
						t.Fatalf("%s config.yaml: %v", m, err)
					}
					for k := range keys {
						uses = append(uses, use{name + " " + m.String() + " config.yaml", "topics", k})
					}
				}
				continue
			}
			for _, c := range containers(m.Obj) {
				args := strings.Fields(strings.Join(toStrings(c["args"]), " "))
				sub := subcommand(args)
				if sub == "" {
					continue
				}
				where := name + " " + m.String()
				for _, a := range args {
					if f, ok := strings.CutPrefix(a, "--"); ok {
						f, _, _ = strings.Cut(f, "=")
						uses = append(uses, use{where, sub, f})
					}
				}
				envs, _ := c["env"].([]any)
				for _, e := range envs {
					n, _ := dig(e, "name").(string)
					if f, ok := strings.CutPrefix(n, "WMRL_"); ok && !notFlags[n] {
						uses = append(uses, use{where + " env " + n, sub, strings.ReplaceAll(strings.ToLower(f), "_", "-")})
					}
				}
			}
		}
	}
	project, err := loadCompose(context.Background(), composeFile, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range project.Services {
		if !strings.HasPrefix(s.Image, "wmrl") {
			continue
		}
		sub := subcommand(s.Command)
		for _, a := range s.Command {
			if f, ok := strings.CutPrefix(a, "--"); ok {
				f, _, _ = strings.Cut(f, "=")
				uses = append(uses, use{"docker-compose.yml service " + name, sub, f})
			}
		}
		for n := range s.Environment {
			if f, ok := strings.CutPrefix(n, "WMRL_"); ok && !notFlags[n] {
				uses = append(uses, use{"docker-compose.yml service " + name + " env " + n, sub, strings.ReplaceAll(strings.ToLower(f), "_", "-")})
			}
		}
	}
	if len(uses) < 20 {
		t.Fatalf("only %d option uses found; the parser no longer sees the stages' arguments", len(uses))
	}
	var pending []string
	for _, u := range uses {
		has := flagsOf(u.sub)[u.flag]
		isPending := contains(pendingFlags[u.sub], u.flag)
		switch {
		case has && isPending:
			t.Errorf("wmrl %s now has --%s: remove it from pendingFlags", u.sub, u.flag)
		case !has && isPending:
			pending = append(pending, "wmrl "+u.sub+" --"+u.flag)
		case !has:
			t.Errorf("%s: wmrl %s has no option --%s", u.where, u.sub, u.flag)
		}
	}
	sort.Strings(pending)
	if len(pending) > 0 {
		t.Logf("options used before issue 13 adds them: %s", strings.Join(dedupe(pending), ", "))
	}
}

func subcommand(args []string) string {
	switch {
	case len(args) >= 2 && args[0] == "topics":
		return "topics " + args[1]
	case len(args) >= 1 && !strings.HasPrefix(args[0], "-"):
		return args[0]
	}
	return ""
}

func containers(o map[string]any) []map[string]any {
	var pod any = dig(o, "spec")
	if tpl := dig(o, "spec", "template", "spec"); tpl != nil {
		pod = tpl
	}
	list, _ := dig(pod, "containers").([]any)
	var out []map[string]any
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}
