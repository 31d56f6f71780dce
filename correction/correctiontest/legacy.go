// Package correctiontest holds the older forms of a correction state's snapshot, for the tests of
// the packages that store and read snapshots (statestore, consumers/correct).
package correctiontest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/wmrl/wmrl/correction"
)

// FlatDigest is the hex digest a snapshot of st carried before the chunked digest: the SHA-256 of
// the full encoding.
func FlatDigest(st *correction.State) string {
	d := sha256.Sum256(st.Encode())
	return hex.EncodeToString(d[:])
}

// V1Head returns head (an EncodeHead output) as a version 1 head: the same layout, recorded with
// the flat digest.
func V1Head(head []byte) []byte {
	b := bytes.Clone(head)
	binary.LittleEndian.PutUint16(b[len("WMRLCHD\x00"):], 1)
	return b
}
