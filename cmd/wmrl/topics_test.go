package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestTopicsCheckWithoutPartitions: `topics check` without --partitions checks that the layout
// is consistent, whatever partition count it was created with (it used to compare with the
// create command's default 3); with --partitions it compares with the count given.
func TestTopicsCheckWithoutPartitions(t *testing.T) {
	brokers := testenv.Kafka(t)
	prefix := testenv.Name(t) + "."
	bin := buildWMRL(t, t.TempDir())
	global := []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix}
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, global...)...)
		cmd.Env = testenv.StageEnv()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("topics", "create", "--partitions", "2"); code != 0 {
		t.Fatalf("create: %d\n%s", code, out)
	}
	t.Cleanup(func() { e2eCleanup(t, brokers, testenv.Redis(t), prefix, prefix, nil) })
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"topics", "check"}, 0, "topics ok"},
		{[]string{"topics", "check", "--partitions", "2"}, 0, "topics ok"},
		{[]string{"topics", "check", "--partitions", "3"}, 1, "partitions is 2, want 3"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, code := run(tt.args...)
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d and %q", code, out, tt.code, tt.want)
			}
		})
	}
}

// TestTopicsSchemaRegistry: with --schema-registry (the real registry of WMRL_TEST_REGISTRY),
// `topics check` lists each subject as missing (exit 1) until `topics create` registers the
// schemas, then reports version, id and BACKWARD; a subject whose level differs from
// --schema-compatibility fails the check.
func TestTopicsSchemaRegistry(t *testing.T) {
	brokers := testenv.Kafka(t)
	registry := testenv.Registry(t)
	prefix := testenv.Name(t) + "."
	bin := buildWMRL(t, t.TempDir())
	global := []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix, "--schema-registry", registry}
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, global...)...)
		cmd.Env = testenv.StageEnv()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	rollouts := prefix + "rollouts.v1-value"
	if out, code := run("topics", "check"); code != 1 || !regexp.MustCompile(regexp.QuoteMeta(rollouts)+` +- +- +- +missing`).MatchString(out) {
		t.Fatalf("check before create: exit %d\n%s\nwant exit 1 and %s missing", code, out, rollouts)
	}
	out, code := run("topics", "create", "--partitions", "1")
	t.Cleanup(func() { e2eCleanup(t, brokers, testenv.Redis(t), prefix, prefix, nil) })
	if code != 0 || !regexp.MustCompile(regexp.QuoteMeta(rollouts)+` +registered: id \d+, version 1, BACKWARD`).MatchString(out) {
		t.Fatalf("create: exit %d\n%s", code, out)
	}
	out, code = run("topics", "check")
	if code != 0 || !strings.Contains(out, "topics ok") || !regexp.MustCompile(regexp.QuoteMeta(rollouts)+` +1 +\d+ +BACKWARD +ok`).MatchString(out) {
		t.Fatalf("check after create: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "runs.v1-value") {
		t.Errorf("the runs topic has no schema, but check lists a subject for it:\n%s", out)
	}
	out, code = run("topics", "check", "--schema-compatibility", "FULL")
	if code != 1 || !strings.Contains(out, "compatibility is not FULL") {
		t.Fatalf("check at FULL: exit %d\n%s", code, out)
	}
}
