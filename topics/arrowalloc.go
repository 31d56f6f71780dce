package topics

import (
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// reuseAllocator is an Arrow allocator that keeps freed buffers for the next batch. An advantage
// encoder builds one record batch per step, writes it and releases it, so the same few dozen
// column buffers are needed again at once; the Go allocator would make (and the collector
// sweep) them anew every step. It is not safe for concurrent use: each pooled advEncoder owns
// one.
//
// Buffers have power-of-two capacities (at least 64 bytes, so 64-byte aligned as the Go
// allocator's) and are handed out zeroed, as the Go allocator's are: builders leave the values
// under null slots unwritten, and the payload bytes must not depend on what a buffer held
// before.
type reuseAllocator struct {
	free [maxReuseClass + 1][][]byte
}

const (
	minReuseClass = 6  // 64 bytes
	maxReuseClass = 24 // 16 MiB; larger buffers are left to the collector
)

var _ memory.Allocator = (*reuseAllocator)(nil)

// reuseClass is the size class of a buffer of n bytes: log2 of its capacity.
func reuseClass(n int) int {
	if n <= 1<<minReuseClass {
		return minReuseClass
	}
	return bits.Len(uint(n - 1))
}

func (a *reuseAllocator) Allocate(size int) []byte {
	c := reuseClass(size)
	if c > maxReuseClass {
		return make([]byte, size)
	}
	if l := a.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		a.free[c] = l[:len(l)-1]
		clear(b[:cap(b)])
		return b[:size]
	}
	return make([]byte, size, 1<<c)
}

func (a *reuseAllocator) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size]
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// Free keeps b for reuse if it is one of ours (a power-of-two capacity in range); anything else
// is left to the collector.
func (a *reuseAllocator) Free(b []byte) {
	n := cap(b)
	if n < 1<<minReuseClass || n&(n-1) != 0 {
		return
	}
	if c := bits.Len(uint(n)) - 1; c <= maxReuseClass {
		a.free[c] = append(a.free[c], b[:0])
	}
}
