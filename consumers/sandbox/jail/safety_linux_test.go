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
		kind     Containment
		level    string
		weakHas  string
		weakNone bool
	}{
		{ContainmentProcessGroup, "WARN", "containment pgroup: only the process group is killed", false},
		{ContainmentPIDNamespace, "INFO", "", true},
		{ContainmentCgroup, "INFO", "", true},
	} {
		var buf bytes.Buffer
		j := &Jail{
			cfg:       Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), UseBwrap: true, JobDirBytes: 1 << 20},
			requested: ContainmentAuto,
			contain:   &containment{kind: tt.kind},
		}
		j.LogContainment()
		var line struct{ Level, Weak, Guarantees string }
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v in %s", tt.kind, err, buf.Bytes())
		}
		weakGuarantee := strings.HasPrefix(line.Guarantees, "WEAK")
		if line.Level != tt.level || (line.Weak == "none") != tt.weakNone || !strings.Contains(line.Weak, tt.weakHas) ||
			weakGuarantee == (line.Weak == "none") {
			t.Errorf("%s: level %s, weak %q, guarantees %q: the lines disagree", tt.kind, line.Level, line.Weak, line.Guarantees)
		}
	}
}
