package correction

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// A state's changelog form is a head plus its window in chunks: the head is
// Encode without the window pairs (and without the breakpoints when the
// window alone determines them), and the window pairs are addressed by
// their absolute index, so a sealed step only has to write the head and
// the chunks its new pairs fell into. AssembleState joins them back into a
// state whose Encode — and so its digest — is the original's.

// ChunkPairs is the number of window pairs per changelog chunk: chunk c
// holds the pairs with absolute index in [c·ChunkPairs, (c+1)·ChunkPairs).
const ChunkPairs = 128

// ChunkSlots is the number of chunk slots a window of the given size
// cycles through: chunk c lives in slot c mod ChunkSlots(window). A window
// spans at most ⌈window/ChunkPairs⌉+1 chunks, so the live chunks never
// share a slot; one spare slot keeps the previous step's oldest chunk too.
func ChunkSlots(window int) int { return (window+ChunkPairs-1)/ChunkPairs + 2 }

// headMagic opens every encoded head; HeadEncodingVersion follows it.
const headMagic = "WMRLCHD\x00"

// HeadEncodingVersion is the version EncodeHead writes and the one
// headParts reads (docs/compatibility.md).
const HeadEncodingVersion uint16 = 2

const headFitIncluded = 1

// WindowSpan returns the absolute index of the oldest window pair and the
// number of pairs in the window; the window is [first, first+n).
func (s *State) WindowSpan() (first uint64, n int) {
	return s.totalPairs - uint64(s.win.len()), s.win.len()
}

// AppendWindow appends the window pairs with absolute index in [from, to),
// clipped to the window, as little-endian x, y float64 bits.
func (s *State) AppendWindow(b []byte, from, to uint64) []byte {
	first, n := s.WindowSpan()
	lo := max(from, first)
	hi := min(to, first+uint64(n))
	if lo >= hi {
		return b
	}
	return s.win.appendRange(b, int(lo-first), int(hi-first))
}

// mapFromWindow reports whether the breakpoints in force are a function of
// the window alone: a fit exists and no pair arrived since it was made, so
// refitting the window reproduces it bit for bit.
func (s *State) mapFromWindow() bool { return s.version > 0 && s.pending == 0 }

// EncodeHead returns the state's head: Encode's bytes without the window
// pairs, and without the breakpoints when the window determines them.
//
// Layout: magic[8] version u16 | flags u8 (1: breakpoints included) |
// split u32 | Encode's layout from its magic to the window length n |
// fit version u64 | m u64 and m breakpoints (m = 0 if not included) |
// Encode's tail. split is the length of the part before the fit version,
// where the window pairs belong.
func (s *State) EncodeHead() []byte {
	withMap := !s.mapFromWindow()
	size := 256
	if withMap {
		size += 16 * len(s.fitX)
	}
	b := make([]byte, 0, size)
	b = append(b, headMagic...)
	b = binary.LittleEndian.AppendUint16(b, HeadEncodingVersion)
	var flags byte
	if withMap {
		flags = headFitIncluded
	}
	b = append(b, flags)
	at := len(b)
	b = binary.LittleEndian.AppendUint32(b, 0)
	start := len(b)
	b = s.appendPrefix(b)
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-start))
	b = s.appendFit(b, withMap)
	return s.appendTail(b)
}

// headParts splits a head into its flags, the Encode prefix (ending with
// the window length) and the rest (fit and tail).
func headParts(head []byte) (flags byte, prefix, rest []byte, err error) {
	const fixed = len(headMagic) + 2 + 1 + 4
	if !bytes.HasPrefix(head, []byte(headMagic)) {
		return 0, nil, nil, ErrBadMagic
	}
	if len(head) < fixed {
		return 0, nil, nil, fmt.Errorf("%w: head of %d bytes", ErrTruncated, len(head))
	}
	if v := binary.LittleEndian.Uint16(head[len(headMagic):]); v != HeadEncodingVersion {
		return 0, nil, nil, fmt.Errorf("%w: head version %d (this build reads %d)", ErrUnsupportedVersion, v, HeadEncodingVersion)
	}
	flags = head[len(headMagic)+2]
	if flags > headFitIncluded {
		return 0, nil, nil, fmt.Errorf("%w: head flags %#x", ErrCorruptState, flags)
	}
	split := binary.LittleEndian.Uint32(head[len(headMagic)+3:])
	body := head[fixed:]
	if uint64(split) > uint64(len(body)) || split < 32 {
		return 0, nil, nil, fmt.Errorf("%w: head split %d of %d bytes", ErrCorruptState, split, len(body))
	}
	return flags, body[:split], body[split:], nil
}

// HeadWindow returns the window span a head describes: the absolute index
// of its oldest pair, the number of pairs, and the configured window size
// (which fixes ChunkSlots). The counts are checked against each other by
// AssembleState, not here.
func HeadWindow(head []byte) (first uint64, n int, window int, err error) {
	_, prefix, _, err := headParts(head)
	if err != nil {
		return 0, 0, 0, err
	}
	le := binary.LittleEndian
	total := le.Uint64(prefix[len(prefix)-24:])
	count := le.Uint64(prefix[len(prefix)-8:])
	if count > total || count > maxWindow {
		return 0, 0, 0, fmt.Errorf("%w: head window of %d pairs with %d ever added", ErrCorruptState, count, total)
	}
	// The config's window is the u64 after magic, version and mode.
	if len(prefix) < len(stateMagic)+2+1+8 {
		return 0, 0, 0, fmt.Errorf("%w: head prefix of %d bytes", ErrTruncated, len(prefix))
	}
	w := le.Uint64(prefix[len(stateMagic)+2+1:])
	if w < 1 || w > maxWindow {
		return 0, 0, 0, fmt.Errorf("%w: head window size %d", ErrCorruptState, w)
	}
	return total - count, int(count), int(w), nil
}

// AssembleState joins a head (EncodeHead) and its window pairs (oldest
// first, as AppendWindow writes them) into the state, refitting the map
// when the head left it out. The caller checks the result's Digest against
// the digest recorded with the head.
func AssembleState(head, window []byte) (*State, error) {
	flags, prefix, rest, err := headParts(head)
	if err != nil {
		return nil, err
	}
	_, n, _, err := HeadWindow(head)
	if err != nil {
		return nil, err
	}
	if len(window) != 16*n {
		return nil, fmt.Errorf("%w: head wants %d window pairs, got %d bytes", ErrCorruptState, n, len(window))
	}
	if len(rest) < 16 {
		return nil, fmt.Errorf("%w: head fit of %d bytes", ErrTruncated, len(rest))
	}
	full := make([]byte, 0, len(prefix)+len(window)+len(rest))
	full = append(full, prefix...)
	full = append(full, window...)
	full = append(full, rest...)
	if flags&headFitIncluded != 0 {
		return DecodeState(full)
	}
	// The breakpoints were left out: decode with the identity map, then refit.
	at := len(prefix) + len(window)
	version := binary.LittleEndian.Uint64(full[at:])
	if m := binary.LittleEndian.Uint64(full[at+8:]); version == 0 || m != 0 {
		return nil, fmt.Errorf("%w: head without breakpoints has fit version %d and %d breakpoints", ErrCorruptState, version, m)
	}
	binary.LittleEndian.PutUint64(full[at:], 0)
	st, err := DecodeState(full)
	if err != nil {
		return nil, err
	}
	if st.pending != 0 {
		return nil, fmt.Errorf("%w: head without breakpoints has %d pairs pending", ErrCorruptState, st.pending)
	}
	var bx, by []float64
	if st.cfg.Mode == ModeReference {
		bx, by = fitReference(&st.win, st.cfg.Bins)
	} else {
		bx, by, err = st.fitWindow()
	}
	if err != nil || bx == nil {
		return nil, fmt.Errorf("%w: refitting the window of a head: %v", ErrCorruptState, err)
	}
	st.fitX, st.fitY, st.version = bx, by, version
	return st, nil
}
