package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/consumers/worldmodel"
	"github.com/wmrl/wmrl/internal/conn"
)

// Errors of the credential-file options; start-up fails with them (exit 2).
var (
	// ErrSecretTwice: a credential was given both as a value and as a file.
	ErrSecretTwice = errors.New("given twice")
	// ErrSecretFileEmpty: a credential file holds nothing but line breaks.
	ErrSecretFileEmpty = errors.New("file is empty")
	// ErrSecretFileTooLarge: a credential file is larger than maxSecretFile.
	ErrSecretFileTooLarge = errors.New("file is too large for a credential")
)

// maxSecretFile bounds what a credential file may hold: a key or password is a few hundred
// bytes; a larger file is the wrong path, not a credential.
const maxSecretFile = 64 << 10

// apiKeys are the HTTP API keys read from the environment or from files at start-up; the
// stages take them from here, since the variables are gone from the environment by then.
type apiKeys struct {
	worldModel, policy, openAI string
}

// wm is the world model server's key: WMRL_WM_API_KEY (or --wm-api-key-file), else
// OPENAI_API_KEY.
func (k apiKeys) wm() string { return cmp.Or(k.worldModel, k.openAI) }

// pol is the policy server's key: WMRL_POLICY_API_KEY (or --policy-api-key-file), else
// OPENAI_API_KEY.
func (k apiKeys) pol() string { return cmp.Or(k.policy, k.openAI) }

// secretFile is a credential that may be given as a value (a flag, WMRL_* variable or config key,
// or a variable that is no option) or read from a file named by an option of its own. Both at
// once is an error: which one wins would be a guess.
type secretFile struct {
	flag  string            // the file option, e.g. "sasl-password-file"
	value string            // how the value is given otherwise, for the error message
	isSet func(a *app) bool // whether the value was given
	set   func(a *app, v string)
}

// secretFiles lists every credential-file option. A command without the option (--wm-api-key-file
// is worldmodel's) skips its row.
var secretFiles = []secretFile{
	{flag: "sasl-password-file", value: "--sasl-password (WMRL_SASL_PASSWORD, config sasl-password)",
		isSet: func(a *app) bool { return a.conn.SASLPassword != "" },
		set:   func(a *app, v string) { a.conn.SASLPassword = v }},
	{flag: "redis-password-file", value: "a password in --redis (WMRL_REDIS, config redis)",
		isSet: func(a *app) bool { return conn.URLHasPassword(a.conn.RedisURL) },
		set:   func(a *app, v string) { a.conn.RedisPassword = v }},
	{flag: "schema-registry-password-file", value: "--schema-registry-password (WMRL_SCHEMA_REGISTRY_PASSWORD, config schema-registry-password)",
		isSet: func(a *app) bool { return a.conn.Registry.Password != "" },
		set:   func(a *app, v string) { a.conn.Registry.Password = v }},
	{flag: "wm-api-key-file", value: worldmodel.EnvAPIKey,
		isSet: func(a *app) bool { return a.keys.worldModel != "" },
		set:   func(a *app, v string) { a.keys.worldModel = v }},
	{flag: "policy-api-key-file", value: envPolicyAPIKey,
		isSet: func(a *app) bool { return a.keys.policy != "" },
		set:   func(a *app, v string) { a.keys.policy = v }},
}

// secretEnv are the variables that may carry a credential. They are removed from the process
// environment once read, so no child (a sandbox job) inherits them; see scrubSecretEnv.
var secretEnv = []string{
	envName("sasl-password"), envName("redis"), envName("schema-registry-password"),
	worldmodel.EnvAPIKey, envPolicyAPIKey, worldmodel.EnvOpenAIAPIKey,
}

// readSecrets takes the API keys from the environment (they are not options) and reads every
// credential file the command was given. The first problem is returned as one line naming the
// option and the file.
func (a *app) readSecrets(fset *pflag.FlagSet, lookup func(string) (string, bool)) error {
	get := func(k string) string { v, _ := lookup(k); return v }
	a.keys = apiKeys{worldModel: get(worldmodel.EnvAPIKey), policy: get(envPolicyAPIKey), openAI: get(worldmodel.EnvOpenAIAPIKey)}
	for _, s := range secretFiles {
		f := fset.Lookup(s.flag)
		if f == nil || f.Value.String() == "" {
			continue
		}
		path := f.Value.String()
		if s.isSet(a) {
			return fmt.Errorf("--%s %s: credential %w: %s is set too; give one of them", s.flag, path, ErrSecretTwice, s.value)
		}
		v, err := readSecretFile(path)
		if err != nil {
			return fmt.Errorf("--%s %s: %w", s.flag, path, err)
		}
		s.set(a, v)
	}
	return nil
}

// readSecretFile returns the file's content without trailing line breaks (a Secret written with
// echo, or edited, ends in one). Errors do not repeat the path; the caller names it.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", unwrapPath(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", unwrapPath(err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%w (over %d KiB)", ErrSecretFileTooLarge, maxSecretFile>>10)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", ErrSecretFileEmpty
	}
	return v, nil
}

// unwrapPath drops the "open PATH:" of an *fs.PathError, keeping the cause (and errors.Is on it).
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// scrubSecretEnv removes the credential variables from the process environment, after the
// configuration has been read: children (sandbox jobs, the task's tools) inherit the process
// environment, not the values the stage holds. It cannot clear /proc/<pid>/environ, the block
// the kernel set up at execve; hardening.SetNonDumpable hides that from other processes.
func scrubSecretEnv() error {
	var errs []error
	for _, k := range secretEnv {
		if err := os.Unsetenv(k); err != nil {
			errs = append(errs, fmt.Errorf("unset %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}
