package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

// Every byte value at every position of a word of plain bytes, and after an earlier special byte:
// the lowest mark must be the first byte str has to look at, never a plain one.
func TestSpecialMarksFirstByteToInspect(t *testing.T) {
	isSpecial := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	for c := 0; c < 256; c++ {
		for pos := range 8 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			m := special(binary.LittleEndian.Uint64(w))
			first := bits.TrailingZeros64(m) >> 3
			switch {
			case isSpecial(byte(c)) && first != pos:
				t.Fatalf("byte %#x at %d: first mark at %d", c, pos, first)
			case !isSpecial(byte(c)) && m != 0:
				t.Fatalf("plain byte %#x at %d: marked %#x", c, pos, m)
			}
			// A special byte before it must still be the one found.
			if pos > 0 {
				w[0] = '"'
				if first := bits.TrailingZeros64(special(binary.LittleEndian.Uint64(w))) >> 3; first != 0 {
					t.Fatalf("quote at 0, byte %#x at %d: first mark at %d", c, pos, first)
				}
			}
		}
	}
}
