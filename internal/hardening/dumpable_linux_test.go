package hardening

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestSetNonDumpable checks the flag as the kernel reports it; TestStageEnvironHidden in
// cmd/wmrl checks what it hides from other processes.
func TestSetNonDumpable(t *testing.T) {
	if err := SetNonDumpable(); err != nil {
		t.Fatal(err)
	}
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		t.Fatalf("prctl(PR_GET_DUMPABLE): %v", err)
	}
	if d != 0 {
		t.Fatal("still dumpable after SetNonDumpable")
	}
}
