package jsonscan

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"
)

func TestInternReusesRepeatedValues(t *testing.T) {
	type rec struct {
		Schema string `json:"schema"`
		RunID  string `json:"run_id" wmrl:"intern"`
		ID     string `json:"id"`
	}
	var a, b rec
	if !Decode([]byte(`{"schema":"s","run_id":"run-7","id":"x1"}`), "s", &a) ||
		!Decode([]byte(`{"schema":"s","run_id":"run-7","id":"x1"}`), "s", &b) {
		t.Fatal("Decode declined a valid record")
	}
	if a != b {
		t.Fatalf("decoded %+v and %+v from equal records", a, b)
	}
	if unsafe.StringData(a.RunID) != unsafe.StringData(b.RunID) {
		t.Error("run_id (tagged intern) was allocated twice")
	}
	if unsafe.StringData(a.ID) == unsafe.StringData(b.ID) {
		t.Error("id (not tagged) shares its bytes; only tagged fields are interned")
	}
}

// Colliding slots and concurrent decoders must never hand out another value's string.
func TestInternConcurrentValuesStayExact(t *testing.T) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				want := fmt.Sprintf("v-%d-%d", w, i%(len(internTab)*3))
				if got := intern([]byte(want)); got != want {
					t.Errorf("intern(%q) = %q", want, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	long := string(make([]byte, maxIntern+1))
	if got := intern([]byte(long)); got != long {
		t.Error("a long value came back changed")
	}
}
