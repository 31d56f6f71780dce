package testenv

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// recordingTB captures Skip and Fatal instead of stopping the test, so the
// skip-versus-fail policy itself can be tested.
type recordingTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

func TestMissingServicePolicy(t *testing.T) {
	tests := []struct {
		name, ci, require string
		wantFail          bool
	}{
		{"developer", "", "", false},
		{"ci", "true", "", true},
		{"ci-uppercase", "TRUE", "", true},
		{"make-test", "", "1", true},
		{"ci-false", "false", "0", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvRequire, tc.require)
			t.Setenv(EnvKafka, "")
			t.Setenv(EnvRedis, "")
			for svc, call := range map[string]func(testing.TB){
				"kafka": func(tb testing.TB) { Kafka(tb) },
				"redis": func(tb testing.TB) { Redis(tb) },
			} {
				rec := &recordingTB{TB: t}
				call(rec)
				if rec.failed != tc.wantFail || rec.skipped == tc.wantFail {
					t.Errorf("%s: failed=%v skipped=%v, want failed=%v (%s)", svc, rec.failed, rec.skipped, tc.wantFail, rec.msg)
				}
				if !strings.Contains(rec.msg, "make test") {
					t.Errorf("%s: message %q does not say how to run the tests", svc, rec.msg)
				}
			}
		})
	}
}

func TestUnreachableFailsEvenWhenNotRequired(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(EnvRequire, "")
	// Port 1 on loopback refuses connections at once.
	t.Setenv(EnvKafka, "127.0.0.1:1")
	t.Setenv(EnvRedis, "redis://127.0.0.1:1/0")
	start := time.Now()
	for svc, call := range map[string]func(testing.TB){
		"kafka": func(tb testing.TB) { Kafka(tb) },
		"redis": func(tb testing.TB) { Redis(tb) },
	} {
		rec := &recordingTB{TB: t}
		call(rec)
		if !rec.failed || rec.skipped {
			t.Errorf("%s: failed=%v skipped=%v, want a failure for a set but unreachable address", svc, rec.failed, rec.skipped)
		}
		if !strings.Contains(rec.msg, "unreachable") {
			t.Errorf("%s: message %q does not say unreachable", svc, rec.msg)
		}
	}
	if d := time.Since(start); d > 2*reachTimeout+5*time.Second {
		t.Errorf("reachability checks took %s", d)
	}
}

func TestReachabilityCheckedOnce(t *testing.T) {
	var r reachability
	calls := 0
	probe := func(context.Context) error { calls++; return nil }
	for range 3 {
		if err := r.check("a", probe); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.check("b", probe); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("probe ran %d times for two addresses, want 2", calls)
	}
}

var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func TestNameFor(t *testing.T) {
	tests := []struct {
		test, want string
	}{
		{"TestX", "wmrl.test.TestX.abc"},
		{"TestX/sub_case", "wmrl.test.TestX-sub-case.abc"},
		{"TestX/a.b c#01", "wmrl.test.TestX-a-b-c-01.abc"},
	}
	for _, tc := range tests {
		if got := nameFor(tc.test, "abc"); got != tc.want {
			t.Errorf("nameFor(%q) = %q, want %q", tc.test, got, tc.want)
		}
	}
	long := nameFor(strings.Repeat("x", 500), "0123456789ab")
	if len(long) != maxNameLen || !strings.HasSuffix(long, ".0123456789ab") || !legalTopic.MatchString(long) {
		t.Errorf("long name %q (len %d): want len %d, suffix kept, legal topic", long, len(long), maxNameLen)
	}
}

func TestNameUnique(t *testing.T) {
	a, b := Name(t), Name(t)
	if a == b {
		t.Errorf("two names are equal: %q", a)
	}
	if !legalTopic.MatchString(a) {
		t.Errorf("%q is not a legal topic name", a)
	}
}
