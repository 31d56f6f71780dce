package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/internal/conn"
)

// resolveOptions runs the option resolution of preRun (flags, env, config file, credential
// files) for args against env, without checking services or touching the process environment.
func resolveOptions(t *testing.T, args []string, env map[string]string) (*app, error) {
	t.Helper()
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	cmd, rest, err := newRoot(a).Find(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := applyConfig(cmd.Flags(), a.config, lookup); err != nil {
		return nil, err
	}
	return a, a.readSecrets(cmd.Flags(), lookup)
}

func TestSecretFiles(t *testing.T) {
	_, write := tempFiles(t)
	pw := write("pw", "s3cret\n")
	crlf := write("crlf", "s3cret\r\n\r\n")
	spaces := write("spaces", " s3 cret \n")
	key := write("key", "sk-file")
	cfg := write("cfg.yaml", "sasl-password-file: "+pw+"\nredis: redis://redis:6379/0\nredis-password-file: "+pw+"\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		// check gets the resolved app.
		want func(a *app) (got, want string)
	}{
		{"sasl flag", []string{"train", "--sasl-password-file", pw}, nil,
			func(a *app) (string, string) { return a.conn.SASLPassword, "s3cret" }},
		{"sasl env", []string{"train"}, map[string]string{"WMRL_SASL_PASSWORD_FILE": pw},
			func(a *app) (string, string) { return a.conn.SASLPassword, "s3cret" }},
		{"sasl config file", []string{"train", "--config", cfg}, nil,
			func(a *app) (string, string) { return a.conn.SASLPassword, "s3cret" }},
		{"flag beats env for the file", []string{"train", "--sasl-password-file", spaces}, map[string]string{"WMRL_SASL_PASSWORD_FILE": pw},
			func(a *app) (string, string) { return a.conn.SASLPassword, " s3 cret " }},
		{"CRLF and blank lines trimmed", []string{"train", "--sasl-password-file", crlf}, nil,
			func(a *app) (string, string) { return a.conn.SASLPassword, "s3cret" }},
		{"value alone still works", []string{"train"}, map[string]string{"WMRL_SASL_PASSWORD": "v"},
			func(a *app) (string, string) { return a.conn.SASLPassword, "v" }},
		{"redis password file", []string{"correct", "--redis", "redis://u@redis:6379/0", "--redis-password-file", pw}, nil,
			func(a *app) (string, string) {
				ro, err := a.conn.RedisOptions()
				if err != nil {
					return err.Error(), "s3cret u"
				}
				return ro.Password + " " + ro.Username, "s3cret u"
			}},
		{"redis from config file", []string{"correct", "--config", cfg}, nil,
			func(a *app) (string, string) { return a.conn.RedisPassword, "s3cret" }},
		{"wm key file beats OPENAI_API_KEY", []string{"worldmodel", "--wm-api-key-file", key}, map[string]string{"OPENAI_API_KEY": "sk-openai"},
			func(a *app) (string, string) { return a.keys.wm(), "sk-file" }},
		{"wm key env", []string{"worldmodel"}, map[string]string{"WMRL_WM_API_KEY": "sk-env", "OPENAI_API_KEY": "sk-openai"},
			func(a *app) (string, string) { return a.keys.wm(), "sk-env" }},
		{"wm key OPENAI fallback", []string{"worldmodel"}, map[string]string{"OPENAI_API_KEY": "sk-openai"},
			func(a *app) (string, string) { return a.keys.wm(), "sk-openai" }},
		{"policy key file from env", []string{"generate", "--run-id", "r"}, map[string]string{"WMRL_POLICY_API_KEY_FILE": key},
			func(a *app) (string, string) { return a.keys.pol(), "sk-file" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := resolveOptions(t, tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tt.want(a); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func TestSecretFileErrors(t *testing.T) {
	dir, write := tempFiles(t)
	pw := write("pw", "s3cret\n")
	empty := write("empty", "\n")
	huge := write("huge", strings.Repeat("x", maxSecretFile+1))
	absent := filepath.Join(dir, "absent")
	unreadable := write("unreadable", "s3cret")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		is     error
		substr string
	}{
		{"missing", []string{"train", "--sasl-password-file", absent}, nil, fs.ErrNotExist,
			"--sasl-password-file " + absent + ": no such file or directory"},
		{"directory", []string{"train", "--sasl-password-file", dir}, nil, nil,
			"--sasl-password-file " + dir + ": "},
		{"empty", []string{"train", "--sasl-password-file", empty}, nil, ErrSecretFileEmpty,
			"--sasl-password-file " + empty + ": file is empty"},
		{"too large", []string{"train", "--redis-password-file", huge}, nil, ErrSecretFileTooLarge,
			"--redis-password-file " + huge + ": file is too large"},
		{"flag and file", []string{"train", "--sasl-password", "v", "--sasl-password-file", pw}, nil, ErrSecretTwice,
			"--sasl-password-file " + pw + ": credential given twice: --sasl-password"},
		{"env value and file flag", []string{"train", "--sasl-password-file", pw}, map[string]string{"WMRL_SASL_PASSWORD": "v"}, ErrSecretTwice,
			"given twice"},
		{"redis url password and file", []string{"correct", "--redis", "redis://:v@redis:6379/0", "--redis-password-file", pw}, nil, ErrSecretTwice,
			"--redis-password-file " + pw + ": credential given twice: a password in --redis"},
		{"wm key env and file", []string{"worldmodel", "--wm-api-key-file", pw}, map[string]string{"WMRL_WM_API_KEY": "k"}, ErrSecretTwice,
			"--wm-api-key-file " + pw + ": credential given twice: WMRL_WM_API_KEY"},
		{"policy key env and file", []string{"generate", "--run-id", "r", "--policy-api-key-file", pw}, map[string]string{"WMRL_POLICY_API_KEY": "k"}, ErrSecretTwice,
			"WMRL_POLICY_API_KEY is set too"},
	}
	if os.Geteuid() != 0 { // root reads a mode-0 file
		tests = append(tests, struct {
			name   string
			args   []string
			env    map[string]string
			is     error
			substr string
		}{"unreadable", []string{"train", "--sasl-password-file", unreadable}, nil, fs.ErrPermission,
			"--sasl-password-file " + unreadable + ": permission denied"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveOptions(t, tt.args, tt.env)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.substr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line containing %q", err, tt.substr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("err = %q repeats the secret", err)
			}
		})
	}
}

// TestRedisPasswordTwice checks the library-level guard for callers that fill conn.Options
// themselves.
func TestRedisPasswordTwice(t *testing.T) {
	o := conn.Options{RedisURL: "redis://:a@redis:6379/0", RedisPassword: "b"}
	if _, err := o.RedisOptions(); !errors.Is(err, conn.ErrRedisPasswordTwice) || strings.Contains(err.Error(), ":a@") {
		t.Fatalf("err = %v, want ErrRedisPasswordTwice without the password", err)
	}
}

// TestSecretEnvScrubbed runs a command in process through the real pre-run and then a real child
// process: the credential variables are gone from both, while the command got their values.
func TestSecretEnvScrubbed(t *testing.T) {
	secrets := map[string]string{
		"WMRL_SASL_PASSWORD":  "sasl-s3cret",
		"WMRL_REDIS":          "redis://:redis-s3cret@127.0.0.1:1/0",
		"WMRL_WM_API_KEY":     "wm-s3cret",
		"WMRL_POLICY_API_KEY": "policy-s3cret",
		"OPENAI_API_KEY":      "openai-s3cret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	root := newRoot(a)
	// probe runs the pre-run and then fails fast: nothing listens on port 1.
	root.SetArgs([]string{"probe", "--timeout", "1s", "http://127.0.0.1:1/"})
	_ = root.Execute()
	if a.conn.SASLPassword != "sasl-s3cret" || a.keys.wm() != "wm-s3cret" || a.keys.pol() != "policy-s3cret" || !conn.URLHasPassword(a.conn.RedisURL) {
		t.Fatalf("the command lost the values it read: %+v %+v", a.conn, a.keys)
	}
	for k := range secrets {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q still in the environment", k, v)
		}
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cret") {
		t.Errorf("a child's environment holds a secret:\n%s", out)
	}
}
