package hardening

import "testing"

// TestSetNonDumpable checks the flag as the kernel reports it; TestStageEnvironHidden in
// cmd/wmrl checks what it hides from other processes.
func TestSetNonDumpable(t *testing.T) {
	if err := SetNonDumpable(); err != nil {
		t.Fatal(err)
	}
	d, err := Dumpable()
	if err != nil {
		t.Fatal(err)
	}
	if d {
		t.Fatal("still dumpable after SetNonDumpable")
	}
}
