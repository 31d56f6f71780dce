package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is set at build time (-ldflags "-X main.version=v1.2.3"); when empty, --version
// reports the module version and VCS revision the Go toolchain recorded.
var version string

// versionString is what `wmrl --version` prints after "wmrl version ".
func versionString() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return cmp.Or(v, "unknown")
	}
	v = cmp.Or(v, bi.Main.Version)
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " rev " + rev
		if modified == "true" {
			v += " (modified)"
		}
	}
	return v + " " + bi.GoVersion
}

// otherEnv lists the WMRL_* variables that are not options yet may be in a wmrl binary's
// environment: secrets read directly, the variables docker-compose.yml, the deploy/local
// scripts, the Python client and the tests read. Any other WMRL_* name is a typo, or an option
// this version does not have, and fails the start.
var otherEnv = map[string]bool{
	// Secrets, read directly so they never appear in flags.
	envPolicyAPIKey:   true,
	"WMRL_WM_API_KEY": true,
	// docker-compose.yml, interpolated on the host into the stages' options.
	"WMRL_WM_BASE_URL": true, "WMRL_WM_MODEL": true, "WMRL_POLICY_BASE_URL": true,
	"WMRL_POLICY_MODEL": true, "WMRL_SANDBOX_ARGV": true, "WMRL_SANDBOX_GRADE_ARGV": true,
	// deploy/local/*.sh and the Makefile's test services.
	"WMRL_LOCAL_DIR": true, "WMRL_SERVICES_STATE": true, "WMRL_CACHE": true,
	"WMRL_KAFKA_PORT": true, "WMRL_KAFKA_CONTROLLER_PORT": true, "WMRL_KAFKA_VERSION": true,
	"WMRL_LOG4J_VERSION": true, "WMRL_KAFKA_HEAP": true, "WMRL_KAFKA_EXTRA_PROPERTIES": true,
	"WMRL_KAFKA_READY_TIMEOUT": true, "WMRL_KAFKA_STOP_TIMEOUT": true,
	"WMRL_REDIS_PORT": true, "WMRL_REDIS_STOP_TIMEOUT": true,
	"WMRL_REGISTRY_VERSION": true, "WMRL_REGISTRY_PORT": true, "WMRL_REGISTRY_HEAP": true,
	"WMRL_REGISTRY_READY_TIMEOUT": true, "WMRL_REGISTRY_STOP_TIMEOUT": true, "WMRL_SERVICES_REGISTRY": true,
	"WMRL_CLUSTER_BASE_PORT": true, "WMRL_CLUSTER_NODES": true,
	// Tests (every WMRL_TEST_* name is also accepted).
	"WMRL_REQUIRE_SERVICES": true, "WMRL_CHAOS": true, "WMRL_CHAOS_ONLY": true, "WMRL_CHAOS_OUTAGE": true, "WMRL_CORRECT_CHILD": true,
	"WMRL_SOAK": true, "WMRL_SOAK_RUNS": true, "WMRL_SOAK_OUT": true, "WMRL_SOAK_STRICT": true,
	// The Python client's trainer integrations.
	"WMRL_START_STEP": true, "WMRL_FLUSH_AFTER": true, "WMRL_RM_TOKEN": true,
	"WMRL_STRIP": true, "WMRL_FAILURE_REWARD": true, "WMRL_PRIME_CREDIT": true,
}

// testEnvPrefix starts the variables tests define for themselves.
const testEnvPrefix = "WMRL_TEST_"

// checkEnv fails on the first WMRL_* variable in environ that is neither an option of some
// command (WMRL_<OPTION>) nor in otherEnv: a misspelt WMRL_BROKER would otherwise be ignored
// and the stage would start against the default broker. It suggests the closest known name.
func checkEnv(environ []string, options map[string]bool) error {
	known := map[string]bool{}
	for o := range options {
		known[envName(o)] = true
	}
	for n := range otherEnv {
		known[n] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || strings.HasPrefix(name, testEnvPrefix) {
			continue
		}
		unknown = append(unknown, name)
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	msg := fmt.Sprintf("unknown environment variable %s", unknown[0])
	if s := closest(unknown[0], slices.Sorted(maps.Keys(known))); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	} else {
		msg += " (every option's variable is WMRL_<OPTION>, e.g. WMRL_BROKERS; see wmrl --help)"
	}
	if len(unknown) > 1 {
		msg += fmt.Sprintf("; also %s", strings.Join(unknown[1:], ", "))
	}
	return errors.New(msg)
}

// flagError adds a suggestion to pflag's "unknown flag: --x": cobra suggests subcommands but
// not flags. A flag that belongs to other commands is named with them.
func flagError(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	name, _, _ = strings.Cut(name, "=")
	var mine []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { mine = append(mine, f.Name) })
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { mine = append(mine, f.Name) })
	if s := closest(name, mine); s != "" {
		return fmt.Errorf("%w (did you mean --%s?)", err, s)
	}
	if alias, owner := deprecatedAlias(cmd.Root(), name); alias != "" && slices.Contains(mine, alias) {
		// Another command's old name of a flag this command has (generate's --run-id): the
		// flag to use here, not the command that still accepts the old name.
		return fmt.Errorf("%w (did you mean --%s? --%s is %s's deprecated name for it)", err, alias, name, owner)
	}
	if others := commandsWithFlag(cmd.Root(), name); len(others) > 0 {
		return fmt.Errorf("%w: it is an option of %s, not of %s", err, strings.Join(others, ", "), cmd.CommandPath())
	}
	return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
}

// deprecatedFlagUse finds the replacement in a deprecation message ("use --run").
var deprecatedFlagUse = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// deprecatedAlias returns the flag that a deprecated local flag called name of some command
// under root stands for (from its deprecation message), and that command's path.
func deprecatedAlias(root *cobra.Command, name string) (alias, owner string) {
	var walk func(c *cobra.Command) bool
	walk = func(c *cobra.Command) bool {
		if f := c.LocalFlags().Lookup(name); f != nil && f.Deprecated != "" {
			if m := deprecatedFlagUse.FindStringSubmatch(f.Deprecated); m != nil {
				alias, owner = m[1], c.CommandPath()
				return true
			}
		}
		return slices.ContainsFunc(c.Commands(), walk)
	}
	walk(root)
	return alias, owner
}

// commandsWithFlag lists the commands under root that define a local flag called name.
func commandsWithFlag(root *cobra.Command, name string) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.LocalFlags().Lookup(name) != nil {
			out = append(out, c.CommandPath())
		}
		for _, sc := range c.Commands() {
			walk(sc)
		}
	}
	walk(root)
	return out
}

// closest returns the candidate nearest to s in edit distance, if it is near enough to be a
// typo (at most 2 edits, and fewer than a third of s's length) and unambiguous.
func closest(s string, candidates []string) string {
	best, bestD, tie := "", 1<<30, false
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		switch {
		case d < bestD:
			best, bestD, tie = c, d, false
		case d == bestD && c != best:
			tie = true
		}
	}
	if best == "" || tie || bestD > 2 || 3*bestD >= len(s) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (in bytes; names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
