package topics

import (
	"bytes"
	"fmt"
	"testing"
)

func TestReuseAllocator(t *testing.T) {
	var a reuseAllocator
	tests := []struct {
		size, cap int
	}{
		{0, 64}, {1, 64}, {64, 64}, {65, 128}, {1000, 1024}, {1 << 20, 1 << 20},
	}
	for _, tt := range tests {
		b := a.Allocate(tt.size)
		if len(b) != tt.size || cap(b) != tt.cap {
			t.Errorf("Allocate(%d): len %d cap %d, want len %d cap %d", tt.size, len(b), cap(b), tt.size, tt.cap)
		}
	}

	b := a.Allocate(100)
	for i := range b {
		b[i] = 0xAB
	}
	a.Free(b)
	again := a.Allocate(120)
	if &again[0] != &b[0] {
		t.Fatal("a freed buffer of the same class was not reused")
	}
	if !bytes.Equal(again[:cap(again)], make([]byte, cap(again))) {
		t.Fatal("a reused buffer is not zeroed")
	}

	a.Free(make([]byte, 100)) // not a power-of-two capacity: not ours, not kept
	if n := len(a.free[reuseClass(100)]); n != 0 {
		t.Fatalf("a foreign buffer was kept for reuse (%d free)", n)
	}

	grown := a.Reallocate(300, again)
	if cap(grown) != 512 || !bytes.Equal(grown, make([]byte, 300)) {
		t.Fatalf("Reallocate(300): cap %d", cap(grown))
	}
	if n := len(a.free[reuseClass(120)]); n != 1 {
		t.Fatalf("the buffer Reallocate outgrew was not kept: %d free", n)
	}

	kept := func() (n int) {
		for _, l := range a.free {
			n += len(l)
		}
		return n
	}
	before := kept()
	a.Free(a.Allocate(1<<maxReuseClass + 1))
	if kept() != before {
		t.Fatal("a buffer above the largest class was kept")
	}
}

// TestEncodeReusedBuffersSameBytes encodes batches with nulls in different places through one
// encoder, which reuses the buffers of the batch before, and through a fresh encoder per batch:
// the payloads must be byte-identical, so a reused buffer never leaks what it held into the
// slots a null leaves unwritten.
func TestEncodeReusedBuffersSameBytes(t *testing.T) {
	codec := newAdvCodec(AdvantageSchemaV2, true)
	reused := codec.newEncoder()
	for i, n := range []int{64, 3, 200, 64, 1, 130} {
		rows := manyRows(n)
		for j := range rows {
			r := &rows[j]
			switch (i + j) % 3 {
			case 0:
				r.Predicted, r.PredictedOK, r.Mask, r.Advantage, r.Source = 0, false, false, 0, ""
			case 1:
				r.Staleness, r.StalenessOK, r.Mask, r.Advantage, r.MaskReason = int64(j), true, false, 0, MaskStale
			}
		}
		got, err := codec.encodeWith(reused, rows)
		if err != nil {
			t.Fatal(err)
		}
		want, err := codec.encodeWith(codec.newEncoder(), rows)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d (%d rows): the payload of a reused encoder differs from a fresh one's", i, n)
		}
		back, err := DecodeAdvantages(got)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(back) != fmt.Sprint(rows) {
			t.Fatalf("batch %d does not round-trip", i)
		}
	}
}
