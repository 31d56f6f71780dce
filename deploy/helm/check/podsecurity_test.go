package main

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/pod-security-admission/api"
)

// seccompFile is the sandbox pod's seccomp profile as the chart ships it.
const seccompFile = "../wmrl/files/wmrl-sandbox-seccomp.json"

// podSecurityRow is one row of the Pod Security table of docs/security.md: a mode of the chart,
// the values file that selects it, and the levels its sandbox pod and every other pod pass.
type podSecurityRow struct {
	mode, values       string
	sandbox, otherPods api.Level
}

// documentedPodSecurity parses the <!-- pod-security-table --> block of docs/security.md.
func documentedPodSecurity(t *testing.T) []podSecurityRow {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- pod-security-table")
	table, _, ok2 := strings.Cut(rest, "<!-- /pod-security-table -->")
	if !ok || !ok2 {
		t.Fatal("docs/security.md has no <!-- pod-security-table --> … <!-- /pod-security-table --> block")
	}
	level := func(cell string) api.Level {
		w, _, _ := strings.Cut(strings.TrimSpace(strings.ReplaceAll(cell, "*", "")), " ")
		l, err := api.ParseLevel(w)
		if err != nil {
			t.Fatalf("pod security table: level %q: %v", cell, err)
		}
		return l
	}
	var rows []podSecurityRow
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 4 || strings.Contains(cells[0], "---") || strings.TrimSpace(cells[0]) == "mode" {
			continue
		}
		rows = append(rows, podSecurityRow{mode: strings.TrimSpace(cells[0]), values: strings.Trim(strings.TrimSpace(cells[1]), "`"),
			sandbox: level(cells[2]), otherPods: level(cells[3])})
	}
	if len(rows) < 3 {
		t.Fatalf("pod security table: %d rows parsed, want the default, runtime-class and private-/proc modes at least", len(rows))
	}
	return rows
}

// TestPodSecurityLevels renders the chart in every mode the Pod Security table of
// docs/security.md lists and evaluates each pod with the Kubernetes pod-security admission
// library (baseline and restricted, latest policy version): each pod passes exactly the level the
// table states — the sandbox pod its own, every other stage's pod the other column — and no pod
// is below baseline, so the chart installs where baseline is enforced.
func TestPodSecurityLevels(t *testing.T) {
	rows := documentedPodSecurity(t)
	seen := map[string]bool{}
	for _, row := range rows {
		t.Run(row.values, func(t *testing.T) {
			var files []string
			if row.values != "values.yaml" {
				files = []string{"../wmrl/" + row.values}
			}
			seen[row.values] = true
			pls, err := PodSecurityLevels(render(t, files))
			if err != nil {
				t.Fatal(err)
			}
			sandbox := 0
			for _, p := range pls {
				want := row.otherPods
				if p.Manifest.Obj["kind"] == "Deployment" && name(p.Manifest) == "wmrl-sandbox" {
					want = row.sandbox
					sandbox++
				}
				if p.Level != want {
					t.Errorf("%s (%s): %s passes %s, the table says %s; %s", row.mode, row.values, p.Manifest, p.Level, want, p.Short)
				}
				if p.Level == api.LevelPrivileged {
					t.Errorf("%s: below baseline: %s", p.Manifest, p.Short)
				}
			}
			if sandbox != 1 || len(pls) < 4 {
				t.Fatalf("%d sandbox pods and %d pods in all rendered; the table's mode renders no sandbox", sandbox, len(pls))
			}
		})
	}
	for name, files := range valueSets {
		if v := strings.TrimPrefix(strings.Join(files, ""), "../wmrl/"); !seen[v] && !(name == "default" && seen["values.yaml"]) {
			t.Errorf("value set %s (%s) has no row in the Pod Security table", name, v)
		}
	}
}

// TestPodSecurityRefusesUnconfined: the sandbox pod as the chart rendered it before (seccomp and
// AppArmor Unconfined, /proc unmasked, in the node's user namespace) is below baseline, with the
// library naming each of the three; so the evaluation above can fail.
func TestPodSecurityRefusesUnconfined(t *testing.T) {
	f := t.TempDir() + "/values.yaml"
	old := `stages:
  sandbox:
    jail:
      hostUsers: true
      seccompProfile: null
      podSecurityContext:
        seccompProfile: {type: Unconfined}
        appArmorProfile: {type: Unconfined}
      securityContext:
        procMount: Unmasked
`
	if err := os.WriteFile(f, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	pls, err := PodSecurityLevels(render(t, []string{f}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pls {
		if name(p.Manifest) != "wmrl-sandbox" {
			continue
		}
		if p.Level != api.LevelPrivileged {
			t.Fatalf("unconfined sandbox pod passes %s", p.Level)
		}
		for _, want := range []string{"seccompProfile", "AppArmor profile", "procMount"} {
			if !strings.Contains(p.Short, want) {
				t.Errorf("baseline refusal %q does not name %s", p.Short, want)
			}
		}
		return
	}
	t.Fatal("no sandbox pod rendered")
}

// TestSandboxPodWiring checks what the levels above rest on, per mode: the sandbox pod's
// Localhost profile is the node file or the one the Security Profiles Operator writes for the
// rendered SeccompProfile (whose spec is the chart's profile file), jobs get --jail-proc to match
// procMount, and runtimeClassName reaches the sandbox pod only.
func TestSandboxPodWiring(t *testing.T) {
	profile, err := os.ReadFile(seccompFile)
	if err != nil {
		t.Fatal(err)
	}
	var wantSpec any
	if err := json.Unmarshal(profile, &wantSpec); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set, localhost, jailProc, procMount, runtimeClass string
		operator                                          bool
	}{
		{"default", "wmrl/sandbox-seccomp.json", "--jail-proc=none", "Default", "", false},
		{"production", "operator/wmrl-sandbox.json", "--jail-proc=none", "Default", "", true},
		{"runtimeclass", "wmrl/sandbox-seccomp.json", "--jail-proc=none", "Default", "gvisor", false},
		{"private-proc", "wmrl/sandbox-seccomp.json", "--jail-proc=private", "Unmasked", "", false},
	} {
		t.Run(c.set, func(t *testing.T) {
			profiles := 0
			for _, m := range render(t, valueSets[c.set]) {
				if m.Obj["kind"] == "SeccompProfile" {
					profiles++
					if name(m) != "wmrl-sandbox" || !reflect.DeepEqual(m.Obj["spec"], wantSpec) {
						t.Errorf("%s: want name wmrl-sandbox and the spec of %s", m, seccompFile)
					}
				}
				pod, _ := dig(m.Obj, "spec", "template", "spec").(map[string]any)
				if pod == nil {
					continue
				}
				rc, _ := pod["runtimeClassName"].(string)
				if name(m) != "wmrl-sandbox" {
					if rc != "" {
						t.Errorf("%s: runtimeClassName %q on a pod other than the sandbox", m, rc)
					}
					continue
				}
				sp := dig(pod, "securityContext", "seccompProfile")
				if dig(sp, "type") != "Localhost" || dig(sp, "localhostProfile") != c.localhost {
					t.Errorf("seccompProfile %v, want Localhost %s", sp, c.localhost)
				}
				ctr := container(m.Obj)
				if !slices.Contains(toStrings(ctr["args"]), c.jailProc) || dig(ctr, "securityContext", "procMount") != c.procMount {
					t.Errorf("args %v, procMount %v: want %s with %s", ctr["args"], dig(ctr, "securityContext", "procMount"), c.jailProc, c.procMount)
				}
				if rc != c.runtimeClass {
					t.Errorf("runtimeClassName %q, want %q", rc, c.runtimeClass)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[c.operator]; profiles != want {
				t.Errorf("%d SeccompProfiles rendered, want %d", profiles, want)
			}
		})
	}
}
