// Command check renders the wmrl Helm chart with Helm's own engine and validates every
// manifest offline: built-in kinds by strict decoding into the Kubernetes API types (unknown
// fields, wrong types, bad quantities) and the API server's metadata rules, custom resources
// (Strimzi KafkaTopic and KafkaUser, KEDA ScaledObject and TriggerAuthentication,
// prometheus-operator ServiceMonitor) against the vendored CRD schemas in testdata/crds, and the
// whole rendering against rules that join objects (selectors, ports, references, ACL
// operations, the topic layout wmrl expects), and evaluates every pod against the Pod Security
// Standards (baseline and restricted, with Kubernetes' own pod-security admission library): a pod
// below baseline fails the check.
//
//	go run . -chart ../wmrl                        # default values
//	go run . -chart ../wmrl -f ../wmrl/ci/production-values.yaml
//	go run . -seccomp-profile ../wmrl/files/wmrl-sandbox-seccomp.json   # regenerate the profile
//
// It is its own module so the main wmrl module does not depend on Helm or Kubernetes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/pod-security-admission/api"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var values fileList
	chart := flag.String("chart", "../wmrl", "chart directory")
	crds := flag.String("crds", "testdata/crds", "directory of vendored CustomResourceDefinition files")
	release := flag.String("release", "wmrl", "release name")
	namespace := flag.String("namespace", "wmrl", "release namespace")
	show := flag.Bool("print", false, "also print the rendered manifests (like helm template)")
	flag.Var(&values, "f", "values file (repeatable; later files win)")
	compose := flag.String("compose", "", "instead: check this Compose file with every profile (like docker compose config)")
	seccompOut := flag.String("seccomp-profile", "", "instead: write the sandbox pod's seccomp profile to this file (the chart's files/wmrl-sandbox-seccomp.json)")
	flag.Parse()

	var code int
	switch {
	case *seccompOut != "":
		code = writeSeccompProfile(*seccompOut)
	case *compose != "":
		code = checkCompose(*compose)
	default:
		code = checkChart(*crds, *chart, values, Release{Name: *release, Namespace: *namespace}, *show)
	}
	if code != 0 {
		os.Exit(code)
	}
}

// writeSeccompProfile writes the sandbox pod's seccomp profile to path; it returns the exit
// status.
func writeSeccompProfile(path string) int {
	b, err := SandboxSeccompProfile()
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp-profile:", err)
		return 1
	}
	return 0
}

// checkCompose checks the Compose file at path with every profile; it returns the exit status.
func checkCompose(path string) int {
	profiles, problems, err := CheckCompose(context.Background(), path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "compose-check:", p)
	}
	if len(problems) > 0 {
		return 1
	}
	fmt.Printf("compose-check: %s is valid with profiles %s (compose-go)\n", path, strings.Join(profiles, ", "))
	return 0
}

// checkChart renders the chart with the values files, validates every manifest against the
// CRDs in crds and the join rules, and evaluates every pod against the Pod Security Standards;
// it returns the exit status (2: the validator could not be built).
func checkChart(crds, chart string, values fileList, rel Release, show bool) int {
	v, err := NewValidator(crds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-check:", err)
		return 2
	}
	ms, err := Render(chart, values, rel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-check:", err)
		return 1
	}
	if show {
		for _, m := range ms {
			fmt.Printf("---\n# %s\n%s\n", m.Source, m.JSON)
		}
	}
	r := v.Validate(ms)
	label := "default values"
	if len(values) > 0 {
		label = strings.Join(values, " + ")
	}
	for _, e := range r.Errors {
		fmt.Fprintln(os.Stderr, "k8s-check:", e)
	}
	kinds := make([]string, 0, len(r.Kinds))
	for k, n := range r.Kinds {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	if len(r.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "k8s-check: %s: %d of %d manifests rendered, %d errors\n", label, len(ms), len(ms), len(r.Errors))
		return 1
	}
	fmt.Printf("k8s-check: %s: %d manifests valid (%s)\n", label, len(ms), strings.Join(kinds, ", "))
	return podSecurity(label, ms)
}

// podSecurity prints every pod's Pod Security level and fails (exit status 1) for a pod below
// baseline.
func podSecurity(label string, ms []Manifest) int {
	pls, err := PodSecurityLevels(ms)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-check:", err)
		return 1
	}
	var levels []string
	below := false
	for _, p := range pls {
		levels = append(levels, fmt.Sprintf("%s/%s %s", p.Manifest.Obj["kind"], name(p.Manifest), p.Level))
		if p.Level == api.LevelPrivileged {
			below = true
			fmt.Fprintf(os.Stderr, "k8s-check: %s is below Pod Security baseline: %s\n", p.Manifest, p.Short)
		}
	}
	fmt.Printf("k8s-check: %s: Pod Security: %s\n", label, strings.Join(levels, ", "))
	if below {
		return 1
	}
	return 0
}
