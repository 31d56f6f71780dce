package statestore

import (
	"fmt"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// Chunk is one window chunk with its encoding (topics.EncodeCalibrationChunk), made once when
// the step is sealed and shared by the changelog record and the Redis value.
type Chunk struct {
	topics.CalibrationChunk
	Value []byte
}

// WindowChunks returns the chunks of st's window that hold pairs added after prevTotal pairs
// (prevTotal 0: every chunk of the window), each with all of its window pairs, encoded.
func WindowChunks(st *correction.State, prevTotal uint64) []Chunk {
	first, n := st.WindowSpan()
	end := first + uint64(n)
	from := max(prevTotal, first)
	if from >= end {
		return nil
	}
	const c = correction.ChunkPairs
	slots := uint64(correction.ChunkSlots(st.Config().Window))
	var out []Chunk
	for k := from / c; k <= (end-1)/c; k++ {
		lo := max(k*c, first)
		ch := topics.CalibrationChunk{RunID: st.Run(), Stream: st.Stream(), Slot: int(k % slots),
			Step: st.SealedStep(), Chunk: k, First: lo, Pairs: st.AppendWindow(nil, lo, (k+1)*c)}
		out = append(out, Chunk{CalibrationChunk: ch, Value: topics.EncodeCalibrationChunk(ch)})
	}
	return out
}

// WindowFromChunks collects the window pairs a head names from its chunks; chunk(slot, number)
// returns what is stored for chunk number in its slot (Redis stores by number, the changelog by
// slot).
func WindowFromChunks(head []byte, chunk func(slot int, number uint64) (topics.CalibrationChunk, bool)) ([]byte, error) {
	first, n, w, err := correction.HeadWindow(head)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	const c = correction.ChunkPairs
	slots := uint64(correction.ChunkSlots(w))
	end := first + uint64(n)
	win := make([]byte, 0, 16*n)
	for k := first / c; k <= (end-1)/c; k++ {
		ch, ok := chunk(int(k%slots), k)
		if !ok {
			return nil, fmt.Errorf("window chunk %d (slot %d) is missing", k, k%slots)
		}
		lo, hi := max(first, k*c), min(end, (k+1)*c)
		have := ch.First + uint64(len(ch.Pairs)/16)
		if ch.Chunk != k || ch.First > lo || have < hi {
			return nil, fmt.Errorf("slot %d holds chunk %d with pairs [%d, %d), the window needs chunk %d pairs [%d, %d)",
				k%slots, ch.Chunk, ch.First, have, k, lo, hi)
		}
		win = append(win, ch.Pairs[16*(lo-ch.First):16*(hi-ch.First)]...)
	}
	return win, nil
}
