package main

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestStartupMistakes runs the real binary with the start-up mistakes an operator makes and
// asserts each fails within the start-up deadline with one line that names the problem and the
// fix.
func TestStartupMistakes(t *testing.T) {
	brokers := strings.Join(testenv.Kafka(t), ",")
	redisURL := testenv.Redis(t)
	bin := buildWMRL(t, t.TempDir())
	fresh := testenv.Name(t) + "." // a prefix no `topics create` has seen
	silent := silentListener(t)
	const deadline = 3 * time.Second
	live := []string{"--brokers", brokers, "--redis", redisURL, "--startup-timeout", deadline.String()}
	dead := []string{"--brokers", "127.0.0.1:1", "--redis", redisURL, "--startup-timeout", deadline.String()}
	stage := map[string][]string{
		"train":      nil,
		"worldmodel": {"--model", "m", "--metrics-addr", "", "--base-url", liveJudge(t) + "/v1"},
		"sandbox":    {"--single-step-no-private", "--argv", "true", "--metrics-addr", ""},
		"correct":    {"--transactional-id", "wmrl-startup-test"},
	}
	type tc struct {
		name string
		args []string
		env  []string
		code int
		want []string
	}
	var tests []tc
	for _, name := range []string{"train", "worldmodel", "sandbox", "correct"} {
		tests = append(tests,
			tc{name: name + " dead broker", args: cat([]string{name}, stage[name], dead), code: 2,
				want: []string{"nothing listens at the seed brokers: check --brokers"}},
			tc{name: name + " before topics create", args: cat([]string{name}, stage[name], live, []string{"--topic-prefix", fresh}), code: 2,
				want: []string{"topic " + fresh, "does not exist", "wmrl topics create --topic-prefix " + fresh}},
		)
	}
	tests = append(tests,
		tc{name: "train silent broker", args: []string{"train", "--brokers", silent, "--startup-timeout", "1s"}, code: 2,
			want: []string{"no broker answered within"}},
		tc{name: "worldmodel dead base-url", args: cat([]string{"worldmodel"}, stage["worldmodel"], live, []string{"--base-url", "http://127.0.0.1:1/v1"}), code: 2,
			want: []string{"--base-url http://127.0.0.1:1/v1", "nothing listens there: check the host and port"}},
		tc{name: "worldmodel base-url without /v1", args: cat([]string{"worldmodel"}, stage["worldmodel"], live, []string{"--base-url", judgeWithoutModels(t)}), code: 2,
			want: []string{"(404): does the URL end in the API version, e.g. /v1?"}},
		tc{name: "worldmodel model not served", args: cat([]string{"worldmodel"}, stage["worldmodel"], live, []string{"--model", "gpt-typo"}), code: 2,
			want: []string{`--model "gpt-typo" is not served by --base-url`, `it serves "m"`}},
		tc{name: "correct dead redis", args: cat([]string{"correct"}, stage["correct"], live, []string{"--redis", "redis://127.0.0.1:1"}), code: 2,
			want: []string{"redis://127.0.0.1:1", "nothing listens there: check the host and port of --redis"}},
		tc{name: "correct silent redis", args: cat([]string{"correct"}, stage["correct"], live, []string{"--redis", "redis://" + silent, "--startup-timeout", "1s"}), code: 2,
			want: []string{"no answer within"}},
		tc{name: "env typo", args: cat([]string{"train"}, live), env: []string{"WMRL_BROKER=x"}, code: 2,
			want: []string{"unknown environment variable WMRL_BROKER (did you mean WMRL_BROKERS?)"}},
		tc{name: "env unknown", args: cat([]string{"train"}, live), env: []string{"WMRL_FROBNICATE=1"}, code: 2,
			want: []string{"unknown environment variable WMRL_FROBNICATE", "WMRL_<OPTION>"}},
		tc{name: "env of another command", args: []string{"--version"}, env: []string{"WMRL_MODEL=m", "WMRL_TEST_ANYTHING=1", "WMRL_REQUIRE_SERVICES=1"}, code: 0,
			want: []string{"wmrl version "}},
		tc{name: "unsupported sasl", args: cat([]string{"train"}, live), env: []string{"WMRL_SASL_MECHANISM=GSSAPI"}, code: 2,
			want: []string{"--sasl-mechanism GSSAPI is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}},
		tc{name: "flag typo", args: []string{"train", "--brokrs", brokers}, code: 2,
			want: []string{"unknown flag: --brokrs (did you mean --brokers?)"}},
		tc{name: "flag of another command", args: []string{"train", "--model", "m"}, code: 2,
			want: []string{"unknown flag: --model: it is an option of wmrl generate, wmrl worldmodel, not of wmrl train"}},
		tc{name: "deprecated alias of another command", args: []string{"train", "--run-id", "r1"}, code: 2,
			want: []string{"unknown flag: --run-id (did you mean --run? --run-id is wmrl generate's deprecated name for it)"}},
		tc{name: "stray argument", args: []string{"train", "extra"}, code: 2,
			want: []string{`unknown command "extra" for "wmrl train"`}},
		tc{name: "misspelt subcommand of a group", args: []string{"topics", "crate"}, code: 2,
			want: []string{`unknown command "crate" for "wmrl topics" (did you mean "create"?)`}},
		tc{name: "zero deadline", args: []string{"train", "--startup-timeout", "0s"}, code: 2,
			want: []string{"--startup-timeout 0s: want > 0"}},
		tc{name: "version", args: []string{"--version"}, code: 0, want: []string{"wmrl version "}},
		tc{name: "sandbox without the jail", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--bwrap=false"}), code: 2,
			want: []string{"no jail (--bwrap=false)", "refusing to start (set --allow-weak-containment to run anyway)"}},
		tc{name: "sandbox without the seccomp filter", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--seccomp=false"}), code: 2,
			want: []string{"no seccomp filter (--seccomp=false)", "refusing to start (set --allow-weak-containment to run anyway)"}},
		tc{name: "sandbox job as root", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--run-as", "0:0"}), code: 2,
			want: []string{"jobs run as root", "--allow-weak-containment"}},
		tc{name: "sandbox uid range holding nobody", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--run-as-range", "65530-65540"}), code: 2,
			want: []string{"--run-as-range 65530-65540: holds 65534 (nobody)"}},
		tc{name: "sandbox uid range smaller than the pool", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--run-as-range", "100000-100001", "--slots", "4"}), code: 2,
			want: []string{"--run-as-range 100000-100001: 2 uids for --slots 4 (one uid per slot)"}},
		tc{name: "sandbox credentials into the job", args: cat([]string{"sandbox"}, stage["sandbox"], live, []string{"--env-allow", "WMRL_SASL_PASSWORD"}), code: 2,
			want: []string{"WMRL_SASL_PASSWORD is the stage's own setting"}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(testenv.StageEnv(), tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(deadline+10*time.Second, func() { _ = cmd.Process.Kill() })
			err := cmd.Wait()
			timer.Stop()
			took := time.Since(start)
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stderr.String()
			if tt.code == 0 {
				out = stdout.String()
			}
			t.Logf("%v in %v: %s", tt.args, took.Round(time.Millisecond), out)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			// The deadline plus the time a (race-enabled) binary needs to start and exit.
			if took > deadline+2*time.Second {
				t.Errorf("took %v, want within the %v start-up deadline", took, deadline)
			}
			line := strings.TrimSuffix(out, "\n")
			if line == "" || strings.Contains(line, "\n") {
				t.Errorf("want exactly one line, got %q", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("output %q lacks %q", line, w)
				}
			}
		})
	}
}

// silentListener accepts connections and never answers, like a firewalled or hung server.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestCheckEnv(t *testing.T) {
	options := map[string]bool{"brokers": true, "sasl-password": true, "run-id": true}
	tests := []struct {
		name    string
		environ []string
		want    string // empty: accepted
	}{
		{"options and others", []string{"PATH=/bin", "WMRL_BROKERS=a", "WMRL_SASL_PASSWORD=p", "WMRL_WM_API_KEY=k", "WMRL_LOCAL_DIR=/x"}, ""},
		{"test variables", []string{"WMRL_TEST_KAFKA=a", "WMRL_TEST_WHATEVER=1"}, ""},
		{"typo", []string{"WMRL_BROKER=a"}, "unknown environment variable WMRL_BROKER (did you mean WMRL_BROKERS?)"},
		{"swapped letters", []string{"WMRL_RUN_DI=r"}, "(did you mean WMRL_RUN_ID?)"},
		{"far from every name", []string{"WMRL_FROBNICATE=1"}, "unknown environment variable WMRL_FROBNICATE (every option's variable"},
		{"several", []string{"WMRL_ZZZ=1", "WMRL_BROKER=a"}, "WMRL_BROKER (did you mean WMRL_BROKERS?); also WMRL_ZZZ"},
		{"empty value still counts", []string{"WMRL_BROKER="}, "WMRL_BROKER"},
		{"other prefixes ignored", []string{"XWMRL_BROKER=a", "wmrl_broker=a"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkEnv(tt.environ, options)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want containing %q", err, tt.want)
			}
		})
	}
}

// TestRepoEnvNamesAccepted scans the repository (deploy/, docker-compose.yml, python/, the
// scripts, Makefile, Go sources and docs) for WMRL_* names and asserts the binary accepts each,
// so a variable added elsewhere cannot make every stage refuse to start.
func TestRepoEnvNamesAccepted(t *testing.T) {
	root := testenv.RepoRoot(t)
	// Misspellings that this file and the README show as examples of the error.
	examples := map[string]bool{"WMRL_BROKER": true, "WMRL_FROBNICATE": true, "WMRL_ZZZ": true, "WMRL_RUN_DI": true}
	re := regexp.MustCompile(`WMRL_[A-Z0-9_]+`)
	seen := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", ".venv", "__pycache__":
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 2<<20 || info.Mode()&0o111 != 0 && !strings.HasSuffix(path, ".sh") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			return err
		}
		for _, m := range re.FindAllString(string(b), -1) {
			if _, ok := seen[m]; !ok {
				seen[m] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d WMRL_* names under %s: the scan is broken", len(seen), root)
	}
	options := allFlagNames()
	for name, path := range seen {
		if examples[name] {
			continue
		}
		if err := checkEnv([]string{name + "=x"}, options); err != nil {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s (named in %s): %v", name, rel, err)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"brokers", "client-id", "redis", "redis-prefix", "tls", "tls-ca"}
	tests := []struct{ in, want string }{
		{"brokrs", "brokers"},
		{"broker", "brokers"},
		{"redis-prefx", "redis-prefix"},
		{"tl", ""}, // too short to call a typo
		{"tls-c", "tls-ca"},
		{"zzzzzz", ""}, // nothing near
	}
	for _, tt := range tests {
		if got := closest(tt.in, names); got != tt.want {
			t.Errorf("closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// judgeWithoutModels is an HTTP server that answers 404 on every path, like a server given
// --base-url without its /v1; its URL is returned.
func judgeWithoutModels(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// liveJudge serves the test world model and returns its URL (without /v1).
func liveJudge(t *testing.T) string {
	srv := httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(srv.Close)
	return srv.URL
}
