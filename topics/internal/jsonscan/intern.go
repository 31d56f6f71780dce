package jsonscan

import (
	"hash/maphash"
	"sync/atomic"
)

// The intern table returns the string last decoded for the same bytes: run ids, streams, statuses
// and group ids repeat in every record of a step, and one allocation each per record was a good
// part of the correction consumer's decode cost. A slot is a hash bucket holding one string, so
// a collision only costs the allocation it would have cost anyway; it is safe for concurrent
// decoders.
var (
	internTab  [4096]atomic.Pointer[string]
	internSeed = maphash.MakeSeed()
)

// maxIntern bounds the strings interned: ids are short, and a long value is rarely repeated.
const maxIntern = 96

func intern(b []byte) string {
	if len(b) > maxIntern {
		return string(b)
	}
	slot := &internTab[maphash.Bytes(internSeed, b)&(uint64(len(internTab))-1)]
	if s := slot.Load(); s != nil && *s == string(b) {
		return *s
	}
	s := string(b)
	slot.Store(&s)
	return s
}
