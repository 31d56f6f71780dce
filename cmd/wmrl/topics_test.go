package main

import (
	"os/exec"
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
