package jail

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Hiding the cgroup2 mount leaves the v1 hierarchies (where the host has
// them): the detection the stage's v1-only test runs its kill loop with.
func TestDetectCgroupV1Only(t *testing.T) {
	c, err := detectContainment(ContainmentCgroup, true)
	if err != nil {
		t.Skipf("no cgroup v1 memory hierarchy here: %v", err)
	}
	if c.cg.v2 != "" || c.cg.v1Memory == "" {
		t.Fatalf("detection with cgroup2 hidden: %s", c.detail)
	}
}

// Asking for a containment the host cannot give is a start-up error that
// says why, never a silent fallback.
func TestContainmentUnavailable(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "mounts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pf := procFiles{mounts: empty, cgroup: "/proc/self/cgroup"}
	_, err := detectContainmentIn(ContainmentCgroup, pf)
	if !errors.Is(err, ErrContainmentUnavailable) || !strings.Contains(err.Error(), "no cgroup2 mount") || !strings.Contains(err.Error(), "no cgroup v1 memory hierarchy") {
		t.Errorf("cgroup without cgroup mounts: %v", err)
	}
	// Auto falls back to the next containment rather than failing.
	c, err := detectContainmentIn(ContainmentAuto, pf)
	if err != nil || c.kind == ContainmentCgroup {
		t.Errorf("auto without cgroup mounts: %v, %v", c, err)
	}
	if _, err := New(Config{Containment: "jail"}, []string{"true"}); !errors.Is(err, ErrUnknownContainment) {
		t.Errorf("unknown containment: %v", err)
	}
}

func TestParseContainment(t *testing.T) {
	for in, want := range map[string]Containment{"": ContainmentAuto, "auto": ContainmentAuto, " CGROUP ": ContainmentCgroup, "pidns": ContainmentPIDNamespace, "pgroup": ContainmentProcessGroup} {
		if got, err := ParseContainment(in); err != nil || got != want {
			t.Errorf("ParseContainment(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseContainment("docker"); !errors.Is(err, ErrUnknownContainment) {
		t.Errorf("ParseContainment(docker): %v", err)
	}
}

// The job's cgroups carry the configured limits and are removed afterwards.
func TestCgroupJobLimits(t *testing.T) {
	h, notes := detectCgroups(selfProcFiles)
	if !h.usable() {
		t.Skipf("no cgroups here: %v", notes)
	}
	j, err := h.newJob(Limits{MemoryBytes: 64 << 20, Processes: 7})
	if err != nil {
		t.Fatal(err)
	}
	read := func(dir, file string) string {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	memFile := "memory.limit_in_bytes"
	if j.v2mem {
		memFile = "memory.max"
	}
	if got := read(j.memory, memFile); got != "67108864" {
		t.Errorf("%s = %s, want 67108864", memFile, got)
	}
	pidsDir := ""
	switch {
	case h.v2Pids:
		pidsDir = j.v2
	case h.v1Pids != "":
		pidsDir = j.v1[len(j.v1)-1]
	}
	if pidsDir != "" {
		if got := read(pidsDir, "pids.max"); got != "7" {
			t.Errorf("pids.max = %s, want 7", got)
		}
	}
	dirs := append(slices.Clone(j.v1), j.v2)
	if err := j.remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); d != "" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed: %v", d, err)
		}
	}
}

// A program the job's uid cannot reach is a start-up error naming the
// directory, not a failure of every job.
func TestCheckReachable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(inner, "run.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(inner, "key")
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	other := &RunAs{UID: 64999, GID: 64999}
	tests := []struct {
		name  string
		paths []string
		ra    *RunAs
		want  string
	}{
		{"own uid", []string{prog, secret}, stageRunAsOrSelf(), ""},
		{"parent not searchable", []string{prog}, other, "cannot reach " + prog + ": " + dir + " is mode 0700"},
		{"file not readable", []string{"/etc/shadow"}, other, "cannot read /etc/shadow"},
		{"system file", []string{"/bin/sh", "/usr/bin"}, other, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkReachable(tc.paths, tc.ra)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func stageRunAsOrSelf() *RunAs {
	return &RunAs{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
}
