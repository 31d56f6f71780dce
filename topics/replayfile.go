package topics

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Replay file format (agreed with `wmrl digest --file`): a sequence of frames, each a uint32
// big-endian length followed by that many bytes of one Arrow IPC stream exactly as it would be
// the value of an advantages record (ChunkAdvantages payloads, in step order). An empty
// file holds no rows. There is no header, so `cat a b > c` concatenates replays.

// ErrReplayFile marks a malformed replay file.
var ErrReplayFile = errors.New("topics: malformed replay file")

// ReplayWriter appends frames to a replay file.
type ReplayWriter struct {
	w   *bufio.Writer
	hdr [4]byte
}

// NewReplayWriter writes frames to w; call Flush at the end.
func NewReplayWriter(w io.Writer) *ReplayWriter { return &ReplayWriter{w: bufio.NewWriter(w)} }

// WritePayload appends one Arrow IPC payload.
func (rw *ReplayWriter) WritePayload(p []byte) error {
	if len(p) == 0 || len(p) > MaxAdvantageBytes {
		return fmt.Errorf("replay file: payload of %d bytes not in [1,%d]", len(p), MaxAdvantageBytes)
	}
	binary.BigEndian.PutUint32(rw.hdr[:], uint32(len(p)))
	if _, err := rw.w.Write(rw.hdr[:]); err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	if _, err := rw.w.Write(p); err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	return nil
}

// WriteRows chunks one step's rows as the consumer does (ChunkAdvantages) and appends them.
func (rw *ReplayWriter) WriteRows(rows []AdvantageRow, chunkBytes int) error {
	chunks, err := ChunkAdvantages(rows, chunkBytes)
	if err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	for _, c := range chunks {
		if err := rw.WritePayload(c); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes buffered frames through.
func (rw *ReplayWriter) Flush() error {
	if err := rw.w.Flush(); err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	return nil
}

// ReadReplay calls fn with every payload of a replay stream, in order.
func ReadReplay(r io.Reader, fn func(payload []byte) error) error {
	br := bufio.NewReader(r)
	var hdr [4]byte
	for frame := 0; ; frame++ {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%w: frame %d: truncated length: %w", ErrReplayFile, frame, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > MaxAdvantageBytes {
			return fmt.Errorf("%w: frame %d: length %d not in [1,%d]", ErrReplayFile, frame, n, MaxAdvantageBytes)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return fmt.Errorf("%w: frame %d: truncated payload (%d bytes announced): %w", ErrReplayFile, frame, n, err)
		}
		if err := fn(p); err != nil {
			return err
		}
	}
}

// ReadReplayRows decodes every row of a replay stream (DecodeAdvantages per frame).
func ReadReplayRows(r io.Reader) ([]AdvantageRow, error) {
	var rows []AdvantageRow
	frame := 0
	err := ReadReplay(r, func(p []byte) error {
		rs, err := DecodeAdvantages(p)
		if err != nil {
			return fmt.Errorf("%w: frame %d: %w", ErrReplayFile, frame, err)
		}
		frame++
		rows = append(rows, rs...)
		return nil
	})
	return rows, err
}

// WriteReplayFile creates (or truncates) path and writes payloads to it as frames.
func WriteReplayFile(path string, payloads [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	w := NewReplayWriter(f)
	for _, p := range payloads {
		if err := w.WritePayload(p); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("replay file: %w", err)
	}
	return nil
}

// ReadReplayFile reads every row of the replay file at path; feed them to DigestRows.
func ReadReplayFile(path string) ([]AdvantageRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay file: %w", err)
	}
	defer f.Close()
	return ReadReplayRows(f)
}
