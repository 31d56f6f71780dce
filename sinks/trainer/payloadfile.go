package trainer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/wmrl/wmrl/topics"
)

// ReadPayloadFile reads a replay file as written by `wmrl replay --out`: a sequence of entries,
// each a big-endian uint32 length followed by that many bytes of Arrow IPC payload, exactly as
// the value of an advantages record. An empty input is zero entries. Entries are returned
// undecoded; an entry over topics.MaxAdvantageBytes is refused (topics.ErrTooLarge) before
// anything is allocated for it, and a file cut inside an entry is topics.ErrMalformed.
func ReadPayloadFile(r io.Reader) ([][]byte, error) {
	var out [][]byte
	var at int64
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("payload file: entry %d at byte %d: truncated length: %w", len(out), at, topics.ErrMalformed)
			}
			return nil, fmt.Errorf("payload file: entry %d at byte %d: %w", len(out), at, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > topics.MaxAdvantageBytes {
			return nil, fmt.Errorf("payload file: entry %d at byte %d: length %d exceeds %d: %w", len(out), at, n, topics.MaxAdvantageBytes, topics.ErrTooLarge)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("payload file: entry %d at byte %d: %d-byte payload truncated: %w", len(out), at, n, topics.ErrMalformed)
			}
			return nil, fmt.Errorf("payload file: entry %d at byte %d: %w", len(out), at, err)
		}
		out = append(out, p)
		at += 4 + int64(n)
	}
}
