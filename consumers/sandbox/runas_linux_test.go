package sandbox

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// RLIMIT_NPROC is per real UID and ignored for root, so it is tested with
// jail.RunAs nobody; the control run shows the same script succeeds unlimited.
// Not parallel: other processes of the same UID would count.
func TestRunAsProcessLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("RunAs needs root")
	}
	const forkMany = `ok=0; i=0
while [ $i -lt 20 ]; do if sleep 5 & then ok=$((ok+1)); fi; i=$((i+1)); done
echo "{\"score\": $ok}"`
	tests := []struct {
		name   string
		limits jail.Limits
		want   Status
		score  float64
		stderr string
	}{
		{"limited", jail.Limits{Processes: 5}, StatusError, 0, "Cannot fork"},
		{"unlimited", jail.Limits{}, StatusOK, 20, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, marker := markerEnv(t)
			e, err := NewCommandExecutor(CommandConfig{
				Argv:     []string{"/bin/sh", PlaceholderArtifact},
				Timeout:  10 * time.Second,
				Env:      map[string]string{"WMRL_TEST_MARKER": marker},
				ScoreMax: 100,
				// No jail: RLIMIT_NPROC alone is under test. The job dir's
				// parents must be traversable by nobody.
				// pgroup: a pids cgroup would take the place of RLIMIT_NPROC.
				Config: jail.Config{Limits: tc.limits, RunAs: &jail.RunAs{UID: 65534, GID: 65534}, Containment: jail.ContainmentProcessGroup,
					AllowWeakContainment: true, TempDir: os.TempDir()},
			})
			if err != nil {
				t.Fatal(err)
			}
			r := e.Execute(context.Background(), Job{Artifact: []byte(forkMany)})
			if r.Status != tc.want || r.Score != tc.score || !strings.Contains(r.StderrTail, tc.stderr) {
				t.Fatalf("got %s score %v reason %q stderr %q", r.Status, r.Score, r.Reason, r.StderrTail)
			}
			assertNoLeftovers(t, marker)
		})
	}
}
