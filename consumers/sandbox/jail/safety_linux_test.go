package jail

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestLogContainmentLinesAgree: the start-up line's weak field and level agree with its
// guarantees: a WEAK containment (pgroup, as a non-root stage without cgroups gets) is named in
// weak and logged at WARN, never weak=none at INFO.
func TestLogContainmentLinesAgree(t *testing.T) {
	for _, tt := range []struct {
		contain  *containment
		level    string
		weakHas  string
		weakNone bool
	}{
		{&containment{kind: ContainmentProcessGroup}, "WARN", "containment pgroup: only the process group is killed", false},
		// A PID namespace holds the job's processes but gives it no pids cgroup of its own: a fork
		// refused at its limit is invisible to the stage (safety.go, budgets), so it is weak too.
		{&containment{kind: ContainmentPIDNamespace}, "WARN", "no pids cgroup per job", false},
		{&containment{kind: ContainmentCgroup, cg: &cgroupHost{v2Memory: true, v2Pids: true}}, "INFO", "", true},
	} {
		var buf bytes.Buffer
		j := &Jail{
			cfg:       Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), UseBwrap: true, JobDirBytes: 1 << 20, Limits: DefaultLimits()},
			requested: ContainmentAuto,
			contain:   tt.contain,
		}
		kind := tt.contain.kind
		j.LogContainment()
		var line struct{ Level, Weak, Guarantees string }
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v in %s", kind, err, buf.Bytes())
		}
		// The lines agree: a WEAK guarantee is named in weak, and anything in weak is a WARN.
		weakGuarantee := strings.HasPrefix(line.Guarantees, "WEAK")
		if line.Level != tt.level || (line.Weak == "none") != tt.weakNone || !strings.Contains(line.Weak, tt.weakHas) ||
			(weakGuarantee && line.Weak == "none") || ((line.Weak == "none") != (line.Level == "INFO")) {
			t.Errorf("%s: level %s, weak %q, guarantees %q: the lines disagree", kind, line.Level, line.Weak, line.Guarantees)
		}
	}
}
