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
	path := "/proc/self/status"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("testenv: peak RSS: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("testenv: peak RSS: %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("testenv: peak RSS: no VmHWM in %s", path)
	return 0
}
