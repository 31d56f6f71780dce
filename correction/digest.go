package correction

import (
	"crypto/sha256"
	"fmt"
	"sync"
)

// DigestVersion names a definition of the state digest. Both are functions of Encode's bytes,
// so equal states have equal digests under either; a recorded digest is checked with the
// definition it was written with (HeadDigestVersion).
type DigestVersion uint8

const (
	// DigestFlat is the SHA-256 of Encode(). Full encodings and version 1 heads (written
	// before DigestChunked existed) are recorded with it.
	DigestFlat DigestVersion = 1
	// DigestChunked is Digest's definition: a two-level hash whose cost per sealed step is
	// proportional to the window chunks the step changed, not to the window. Version 2 heads
	// are recorded with it.
	DigestChunked DigestVersion = 2
)

// chunkedTag opens the input of a DigestChunked hash, so it never equals a DigestFlat input
// (which opens with stateMagic).
const chunkedTag = "WMRLCDG\x02"

// chunkSum is the SHA-256 of the window pairs with absolute index in [lo, hi), the part of
// changelog chunk k (pairs [k·ChunkPairs, (k+1)·ChunkPairs)) inside the window.
type chunkSum struct {
	k, lo, hi uint64
	sum       [32]byte
}

// Digest is the state's content address under DigestChunked: the SHA-256 of chunkedTag,
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

// DigestAs returns the state's digest under definition v.
func (s *State) DigestAs(v DigestVersion) ([32]byte, error) {
	switch v {
	case DigestFlat:
		h := sha256.New()
		var buf [4096]byte
		h.Write(s.appendPrefix(buf[:0]))
		const per = len(buf) / 16
		for i := 0; i < s.win.len(); i += per {
			h.Write(s.win.appendRange(buf[:0], i, min(i+per, s.win.len())))
		}
		h.Write(s.appendTail(s.appendFit(buf[:0], true)))
		var out [32]byte
		h.Sum(out[:0])
		return out, nil
	case DigestChunked:
		return s.Digest(), nil
	}
	return [32]byte{}, fmt.Errorf("%w: digest version %d", ErrUnsupportedVersion, v)
}

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
