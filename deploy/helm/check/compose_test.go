package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const composeFile = "../../../docker-compose.yml"

func TestComposeValid(t *testing.T) {
	profiles, problems, err := CheckCompose(context.Background(), composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	want := "(default) policy task world-model (all)"
	if got := strings.Join(profiles, " "); got != want {
		t.Errorf("profiles %q, want %q (one per external dependency)", got, want)
	}
}

// TestComposeBroken breaks the repository's Compose file one way at a time, as the issue found
// it broken, and expects the check to say so.
func TestComposeBroken(t *testing.T) {
	orig, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, want string
	}{
		{"no host-gateway mapping", `  extra_hosts:
    - "host.docker.internal:host-gateway"
`, "", "without extra_hosts host.docker.internal:host-gateway"},
		{"worldmodel in the default profile", "    profiles: [world-model]\n", "", "service worldmodel needs something from the host"},
		{"metrics port not published", `    ports:
      - "9466:9466"
`, "", "service correct serves metrics on :9466 but does not publish it"},
		{"healthcheck on the wrong port", "http://127.0.0.1:9465/readyz", "http://127.0.0.1:9464/readyz", "service sandbox has no healthcheck on its metrics port 9465"},
		{"artifact dir not shared", "      - artifacts:/artifacts:ro\n    command: [\"sandbox\"", "      - sandbox-artifacts:/artifacts:ro\n    command: [\"sandbox\"", "--artifact-dir volumes differ"},
		{"metrics on the container's loopback", `"--instance-id", "wmrl-correct-0", "--metrics-addr", ":9466"]`, `"--instance-id", "wmrl-correct-0"]`,
			"service correct: publishes a port but has no --metrics-addr"},
		{"metrics bound to 127.0.0.1", `"--metrics-addr", ":9467"]`, `"--metrics-addr", "127.0.0.1:9467"]`,
			"--metrics-addr 127.0.0.1:9467 binds 127.0.0.1 inside the container"},
		{"unknown key", "  restart: on-failure\n", "  restart: on-failure\n  restarts: 3\n", "restarts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(orig), c.old) {
				t.Fatalf("docker-compose.yml no longer contains %q; update the case", c.old)
			}
			broken := strings.Replace(string(orig), c.old, c.new, 1)
			if c.name == "artifact dir not shared" {
				broken += "  sandbox-artifacts:\n"
			}
			dir := t.TempDir()
			f := filepath.Join(dir, "docker-compose.yml")
			if err := os.WriteFile(f, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			_, problems, err := CheckCompose(context.Background(), f)
			msg := strings.Join(problems, "\n")
			if err != nil {
				msg += "\n" + err.Error()
			}
			if !strings.Contains(msg, c.want) {
				t.Fatalf("check of the broken file does not mention %q:\n%s", c.want, msg)
			}
		})
	}
}
