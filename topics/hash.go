package topics

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// AnchorHash is the stable hash that decides anchor groups (the generator marks them in the step manifest; README.md's data flow): the first 8 bytes of
// SHA-256(run_id + "\x00" + group_id), read as a big-endian uint64 u, scaled to [0,1) as
// (u >> 11) / 2^53. Keeping the top 53 bits makes the conversion to float64 exact, so every
// language gets the same double and the result can never round up to 1.0 (u / 2^64 would, for u
// near 2^64). The NUL separator keeps ("ab","c") and ("a","bc") apart. It is part of the wire
// contract; Python reproduces it as
//
//	u = int.from_bytes(hashlib.sha256(f"{run}\0{group}".encode()).digest()[:8], "big")
//	h = (u >> 11) / 2**53
//
// (testdata/golden/anchor_hash.json holds reference values).
func AnchorHash(runID, groupID string) float64 {
	return float64(AnchorHashUint64(runID, groupID)>>11) / (1 << 53)
}

// AnchorHashUint64 is AnchorHash before scaling; compare it to a threshold when exactness at the
// boundary matters more than readability.
func AnchorHashUint64(runID, groupID string) uint64 {
	h := sha256.New()
	h.Write([]byte(runID))
	h.Write([]byte{0})
	h.Write([]byte(groupID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0])[:8])
}

// IsAnchor reports whether the group is an anchor group for anchor fraction fraction:
// AnchorHash(runID, groupID) < fraction. Fraction 0 selects no group, 1 selects all; NaN selects
// none.
func IsAnchor(runID, groupID string, fraction float64) bool {
	if math.IsNaN(fraction) {
		return false
	}
	return AnchorHash(runID, groupID) < fraction
}
