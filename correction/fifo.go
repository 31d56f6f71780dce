package correction

import (
	"encoding/binary"
	"math"
	"slices"
)

// chunkSize is the number of pairs per FIFO chunk (8 KiB).
const chunkSize = 512

// fifo is the anchor-pair window in arrival order, stored as chunks so a
// sealed state can be cloned without copying the window: every chunk but
// the last is full and never written again, and the last is copied on the
// first write after a clone. Cloning costs O(W/512) pointers instead of a
// 16·W-byte copy.
type fifo struct {
	chunks    [][]pair // oldest first
	off       int      // index of the oldest pair in chunks[0]
	n         int
	tailOwned bool // chunks[len-1] may be appended to in place
}

func (f *fifo) len() int { return f.n }

// clone shares every chunk; the copy's next push copies the tail chunk.
func (f *fifo) clone() fifo {
	return fifo{chunks: slices.Clone(f.chunks), off: f.off, n: f.n}
}

func (f *fifo) push(p pair) {
	k := len(f.chunks)
	if k == 0 || len(f.chunks[k-1]) == chunkSize {
		c := make([]pair, 1, chunkSize)
		c[0] = p
		f.chunks = append(f.chunks, c)
		f.tailOwned = true
		f.n++
		return
	}
	if !f.tailOwned {
		c := make([]pair, len(f.chunks[k-1]), chunkSize)
		copy(c, f.chunks[k-1])
		f.chunks[k-1] = c
		f.tailOwned = true
	}
	f.chunks[k-1] = append(f.chunks[k-1], p)
	f.n++
}

// pop removes and returns the oldest pair; f must not be empty.
func (f *fifo) pop() pair {
	p := f.chunks[0][f.off]
	f.off++
	f.n--
	if f.off == len(f.chunks[0]) {
		f.chunks[0] = nil
		f.chunks = f.chunks[1:]
		f.off = 0
		if len(f.chunks) == 0 {
			f.chunks, f.tailOwned = nil, false
		}
	}
	return p
}

// each calls fn on every pair, oldest first.
func (f *fifo) each(fn func(pair)) {
	for i, c := range f.chunks {
		if i == 0 {
			c = c[f.off:]
		}
		for _, p := range c {
			fn(p)
		}
	}
}

// appendWeights appends every pair's weight, oldest first, as little-endian float64 bits.
func (f *fifo) appendWeights(b []byte) []byte {
	f.each(func(p pair) { b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.w)) })
	return b
}

// pairs returns a copy of the window, oldest first.
func (f *fifo) pairs() []pair {
	out := make([]pair, 0, f.n)
	f.each(func(p pair) { out = append(out, p) })
	return out
}

// appendRange appends the pairs at positions [i, j) (0 = oldest) as
// little-endian x, y float64 bits, the layout of Encode's window.
func (f *fifo) appendRange(b []byte, i, j int) []byte {
	le := binary.LittleEndian
	b = slices.Grow(b, 16*(j-i))
	pos := 0
	for k, c := range f.chunks {
		if k == 0 {
			c = c[f.off:]
		}
		if pos+len(c) <= i {
			pos += len(c)
			continue
		}
		lo := max(i-pos, 0)
		hi := min(j-pos, len(c))
		for _, p := range c[lo:hi] {
			b = le.AppendUint64(b, math.Float64bits(p.x))
			b = le.AppendUint64(b, math.Float64bits(p.y))
		}
		pos += len(c)
		if pos >= j {
			break
		}
	}
	return b
}
