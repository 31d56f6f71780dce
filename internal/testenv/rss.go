package testenv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// ResetPeakRSS resets this process's peak resident set (VmHWM) to its current RSS (Linux:
// "5" to /proc/self/clear_refs), so PeakRSS afterwards measures the peak of what ran in between.
// An in-process stage shares the test binary's memory, so the peak is an upper bound of the
// stage's: it includes the test's own allocations.
func ResetPeakRSS(t testing.TB) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("testenv: reset peak RSS: %v", err)
	}
}

// PeakRSS returns the peak resident set size (VmHWM) of process pid (0: this process) in bytes.
func PeakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	n, err := VmHWM(pid)
	if err != nil {
		t.Fatalf("testenv: peak RSS: %v", err)
	}
	return n
}

// VmHWM reads the peak resident set size of process pid (0: this process) from /proc/<pid>/status,
// in bytes. An exited process (a zombie) has no VmHWM line: an error, as is a process that is gone.
func VmHWM(pid int) (int64, error) {
	path := "/proc/self/status"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: VmHWM %q: %w", path, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in %s", path)
}
