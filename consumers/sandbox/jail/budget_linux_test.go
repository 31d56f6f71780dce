package jail

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseUIDRange(t *testing.T) {
	tests := []struct {
		in, want string // want: "" for ok, else a fragment of the error
	}{
		{"100000-100063", ""},
		{" 200-200 ", ""},
		{"100063-100000", "first uid above last"},
		{"0-10", "holds root"},
		{"65500-65600", "holds 65534 (nobody)"},
		{"4294967200-4294967295", "the invalid uid"},
		{"100000-300000", "at most 65536"},
		{"100000", "want FIRST-LAST"},
		{"a-b", "want FIRST-LAST"},
	}
	if euid := os.Geteuid(); euid != 0 {
		tests = append(tests, struct{ in, want string }{strconv.Itoa(euid) + "-" + strconv.Itoa(euid+1), "the stage's own uid"})
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseUIDRange(tc.in)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseUIDRange(%q): %v", tc.in, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
				t.Fatalf("ParseUIDRange(%q) = %v, %v; want an ErrConfig saying %q", tc.in, r, err, tc.want)
			}
		})
	}
	r, _ := ParseUIDRange("100000-100063")
	if r.Size() != 64 {
		t.Errorf("size %d, want 64", r.Size())
	}
	for slot, want := range map[int]uint32{0: 100000, 63: 100063} {
		if ra, err := r.uid(slot); err != nil || ra.UID != want || ra.GID != want {
			t.Errorf("slot %d: %v, %v; want uid=gid %d", slot, ra, err, want)
		}
	}
	if _, err := r.uid(64); !errors.Is(err, ErrRunAsRange) {
		t.Errorf("slot 64 of 64 uids: %v", err)
	}
}

// Each slot's job runs as its own uid of the range, in and out of the jail;
// a slot beyond the range is a set-up error, not a job as some other uid.
func TestRunAsRangeSlotUID(t *testing.T) {
	r := UIDRange{First: 100000, Last: 100003}
	if _, err := New(Config{RunAsRange: &r, RunAs: &RunAs{UID: 100000, GID: 100000}, AllowWeakContainment: true}, []string{"/usr/bin/id"}); !errors.Is(err, ErrConfig) {
		t.Errorf("--run-as with --run-as-range: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := New(Config{RunAsRange: &r, AllowWeakContainment: true}, []string{"/usr/bin/id"}); !errors.Is(err, ErrRunAsRange) {
			t.Errorf("--run-as-range in a non-root stage: %v", err)
		}
		return
	}
	base, err := os.MkdirTemp("/var/tmp", "wmrl-range-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bwrap := range []bool{false, true} {
		t.Run("bwrap="+strconv.FormatBool(bwrap), func(t *testing.T) {
			j, err := New(Config{RunAsRange: &r, UseBwrap: bwrap, AllowWeakContainment: !bwrap, TempDir: base,
				Limits: Limits{Processes: 64}}, []string{"/usr/bin/id"})
			if err != nil {
				t.Fatal(err)
			}
			if j.MaxSlots() != 4 {
				t.Errorf("MaxSlots %d, want 4", j.MaxSlots())
			}
			for _, slot := range []int{0, 3, 4} {
				dir, err := os.MkdirTemp(base, "job-")
				if err != nil {
					t.Fatal(err)
				}
				o := j.Run(context.Background(), Job{Dir: dir, Argv: []string{"/usr/bin/id", "-u"}, Env: []string{"PATH=" + DefaultPath},
					Timeout: 10 * time.Second, StdoutMax: 1 << 10, StderrMax: 1 << 10, Slot: slot})
				got := strings.TrimSpace(string(o.Stdout))
				if slot == 4 {
					if !errors.Is(o.SetupErr, ErrRunAsRange) {
						t.Errorf("slot 4 of 4 uids: %+v", o)
					}
					continue
				}
				if want := strconv.Itoa(int(r.First) + slot); got != want || o.ExitCode != 0 {
					t.Errorf("slot %d ran as uid %q (exit %d, stderr %q), want %s", slot, got, o.ExitCode, o.Stderr, want)
				}
			}
		})
	}
}

// What the host refused is named from what the host sees, and only that.
func TestRefused(t *testing.T) {
	j := &Jail{cfg: Config{UseBwrap: true, Limits: Limits{Processes: 256}}}
	tests := []struct {
		name string
		o    Outcome
		want string
	}{
		{"pids limit", Outcome{PidsRefused: 3, ExitCode: 0}, "process limit: the kernel refused 3 fork(s) at the job's pids limit of 256"},
		{"jail without a process", Outcome{ExitCode: 1, Stderr: []byte("bwrap: Creating new namespace failed: Resource temporarily unavailable\n")},
			"the jail could not be created for want of a process: bwrap: Creating new namespace failed: Resource temporarily unavailable"},
		{"job's own failure", Outcome{ExitCode: 1, Stderr: []byte("sh: 1: Cannot fork\n")}, ""},
		{"job quoting bwrap later", Outcome{ExitCode: 1, Stderr: []byte("ok\nbwrap: Creating new namespace failed: Resource temporarily unavailable\n")}, ""},
		{"success", Outcome{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := j.refused(tc.o); got != tc.want {
				t.Errorf("refused = %q, want %q", got, tc.want)
			}
		})
	}
}

// The start-up line says where each budget comes from and names a shared one
// as a weakness, at WARN.
func TestBudgetsLogged(t *testing.T) {
	lim := Limits{Processes: 256, MemoryBytes: 1 << 30}
	tests := []struct {
		name        string
		cfg         Config
		contain     *containment
		procs       string
		shared      []string
		wantWarning bool
	}{
		{"pids and memory cgroup", Config{Limits: lim, UseBwrap: true},
			&containment{kind: ContainmentCgroup, cg: &cgroupHost{v1Memory: "/m", v1Pids: "/p"}},
			"pids cgroup per job, 256 processes", nil, false},
		{"non-root stage without delegation", Config{Limits: lim, UseBwrap: true},
			&containment{kind: ContainmentProcessGroup},
			"RLIMIT_NPROC 256 counted in each job's own user namespace",
			[]string{"no pids cgroup per job", "slots share the host's memory"}, true},
		{"no jail, one uid", Config{Limits: lim, RunAs: &RunAs{UID: 65534, GID: 65534}, AllowWeakContainment: true},
			&containment{kind: ContainmentPIDNamespace},
			"RLIMIT_NPROC 256 of one uid shared by every slot",
			[]string{"slots share one process budget", "no pids cgroup per job", "slots share the host's memory"}, true},
		{"no jail, a uid per slot", Config{Limits: lim, RunAsRange: &UIDRange{First: 100000, Last: 100003}, AllowWeakContainment: true},
			&containment{kind: ContainmentPIDNamespace},
			"RLIMIT_NPROC 256 per slot uid (--run-as-range 100000-100003)",
			[]string{"no pids cgroup per job", "slots share the host's memory"}, true},
	}
	if !perUserNSNproc() {
		t.Skip("kernel before 5.14: RLIMIT_NPROC is not counted per user namespace")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			j := &Jail{cfg: tc.cfg, contain: tc.contain}
			procs, _, shared := j.budgets()
			if procs != tc.procs {
				t.Errorf("processes %q, want %q", procs, tc.procs)
			}
			if len(shared) != len(tc.shared) {
				t.Fatalf("shared %q, want %d naming %q", shared, len(tc.shared), tc.shared)
			}
			for i, w := range tc.shared {
				if !strings.HasPrefix(shared[i], w) {
					t.Errorf("shared[%d] = %q, want %q…", i, shared[i], w)
				}
			}
			j.LogContainment()
			line := buf.String()
			if strings.Contains(line, "level=WARN") != tc.wantWarning || !strings.Contains(line, "processes=\""+tc.procs) {
				t.Errorf("containment line %s", line)
			}
			for _, w := range tc.shared {
				if !strings.Contains(line, w) {
					t.Errorf("containment line does not name %q: %s", w, line)
				}
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.18.44-fc": true, "5.14.0-284.el9": true, "5.13.19": false, "4.19.0-26-amd64": false, "5.15": true, "garbage": false} {
		if got := kernelAtLeast(rel, 5, 14); got != want {
			t.Errorf("kernelAtLeast(%q, 5.14) = %v", rel, got)
		}
	}
}
