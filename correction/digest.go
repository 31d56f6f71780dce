package correction

import (
	"crypto/sha256"
	"sync"
)

// chunkedTag opens the input of a Digest hash, so it never equals the input of a hash of
// Encode's bytes (which opens with stateMagic).
const chunkedTag = "WMRLCDG\x02"

// chunkSum is the SHA-256 of the window pairs with absolute index in [lo, hi), the part of
// changelog chunk k (pairs [k·ChunkPairs, (k+1)·ChunkPairs)) inside the window.
type chunkSum struct {
	k, lo, hi uint64
	sum       [32]byte
}

// Digest is the state's content address: the SHA-256 of chunkedTag,
// Encode's bytes before the window pairs, the SHA-256 of each changelog chunk's part of the
// window (oldest first), and Encode's bytes after the window pairs. The prefix fixes the
// window span, so the chunk hashes fix every pair.
//
// A state returned by Correct carries its chunk hashes, computed from its predecessor's by
// rehashing only the chunks the step changed, so sealing a step costs O(change); any other
// state (DecodeState, Advance) hashes its whole window.
func (s *State) Digest() [32]byte {
	sums := s.sums
	if !s.sumsValid {
		sums = s.chunkSums(nil)
	}
	bp := digestBufs.Get().(*[]byte)
	b := append((*bp)[:0], chunkedTag...)
	b = s.appendPrefix(b)
	for i := range sums {
		b = append(b, sums[i].sum[:]...)
	}
	b = s.appendTail(s.appendFit(b, true))
	out := sha256.Sum256(b)
	*bp = b
	digestBufs.Put(bp)
	return out
}

// digestBufs holds the buffers Digest assembles its hash input in (a few KiB: the head's fields,
// a hash per window chunk and the breakpoints).
var digestBufs = sync.Pool{New: func() any { return new([]byte) }}

// chunkSums returns the chunk hashes of s's window, oldest first, reusing those of prev (the
// hashes of a state s extends by appending pairs) whose range is unchanged.
func (s *State) chunkSums(prev []chunkSum) []chunkSum {
	first, n := s.WindowSpan()
	if n == 0 {
		return nil
	}
	const c = ChunkPairs
	end := first + uint64(n)
	k0, k1 := first/c, (end-1)/c
	out := make([]chunkSum, 0, k1-k0+1)
	j := 0
	var buf [16 * c]byte
	for k := k0; k <= k1; k++ {
		lo, hi := max(first, k*c), min(end, (k+1)*c)
		for j < len(prev) && prev[j].k < k {
			j++
		}
		if j < len(prev) && prev[j].k == k && prev[j].lo == lo && prev[j].hi == hi {
			out = append(out, prev[j])
			continue
		}
		cs := chunkSum{k: k, lo: lo, hi: hi}
		cs.sum = sha256.Sum256(s.win.appendRange(buf[:0], int(lo-first), int(hi-first)))
		out = append(out, cs)
	}
	return out
}
