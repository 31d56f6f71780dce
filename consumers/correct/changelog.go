package correct

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
)

// mapEvery is how often (in steps) a snapshot carries the fit's breakpoints for dashboards and
// analytics. The state itself never needs them in the changelog: its head either includes them
// or they are refitted from the window on rebuild.
const mapEvery = 64

// windowChunks returns the chunks of st's window that hold pairs added after prevTotal pairs
// (prevTotal 0: every chunk of the window), each with all of its window pairs.
func windowChunks(st *correction.State, prevTotal uint64) []topics.CalibrationChunk {
	first, n := st.WindowSpan()
	end := first + uint64(n)
	from := max(prevTotal, first)
	if from >= end {
		return nil
	}
	const c = correction.ChunkPairs
	slots := uint64(correction.ChunkSlots(st.Config().Window))
	var out []topics.CalibrationChunk
	for k := from / c; k <= (end-1)/c; k++ {
		lo := max(k*c, first)
		out = append(out, topics.CalibrationChunk{RunID: st.Run(), Stream: st.Stream(), Slot: int(k % slots),
			Step: st.SealedStep(), Chunk: k, First: lo, Pairs: st.AppendWindow(nil, lo, (k+1)*c)})
	}
	return out
}

// calibrationRecords appends a sealed step's changelog records to recs: per stream, the window
// chunks the step changed, then the snapshot (whose state is the head), all on the run's partition.
func calibrationRecords(names topics.Names, s *sealed, recs []*kgo.Record) ([]*kgo.Record, error) {
	for i := range s.snaps {
		for _, ch := range s.chunks[i] {
			r := names.CalibrationChunkRecord(ch)
			r.Partition = s.part
			recs = append(recs, r)
		}
		sn := &s.snaps[i]
		r, err := names.CalibrationRecord(*sn)
		if err != nil {
			return nil, fmt.Errorf("correct: calibration run %s stream %s step %d: %w", s.run, sn.Stream, s.step, err)
		}
		r.Partition = s.part
		recs = append(recs, r)
	}
	return recs, nil
}

// changelogState is what the changelog holds for one (run, stream): its latest snapshot and
// the latest chunk record of every slot.
type changelogState struct {
	snap   topics.CalibrationSnapshot
	part   int32
	chunks map[int]topics.CalibrationChunk
}

// readChangelog returns, per calibration key, the latest snapshot and chunks in the given
// partitions.
func readChangelog(ctx context.Context, opts []kgo.Opt, topic string, parts []int32, timeout time.Duration, log *slog.Logger) (map[string]*changelogState, error) {
	out := map[string]*changelogState{}
	if len(parts) == 0 {
		return out, nil
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for _, p := range parts {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	entry := func(key string) *changelogState {
		e := out[key]
		if e == nil {
			e = &changelogState{chunks: map[int]topics.CalibrationChunk{}}
			out[key] = e
		}
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := topicread.ToEnd(ctx, opts, start, timeout/2, log, func(r *kgo.Record) error {
		if topics.IsCalibrationChunk(r) {
			ch, err := topics.DecodeCalibrationChunk(r.Key, r.Value, correction.ChunkPairs)
			if err != nil {
				return fmt.Errorf("%w: %s/%d offset %d: %w", ErrChangelog, r.Topic, r.Partition, r.Offset, err)
			}
			// A copy, so that the fetched batch the value points into can be freed.
			ch.Pairs = append([]byte(nil), ch.Pairs...)
			entry(string(topics.CalibrationKey(ch.RunID, ch.Stream))).chunks[ch.Slot] = ch
			return nil
		}
		s, err := topics.DecodeCalibration(r.Value)
		if err != nil {
			// A changelog record this consumer cannot read means state cannot be trusted.
			return fmt.Errorf("%w: %s/%d offset %d: %w", ErrChangelog, r.Topic, r.Partition, r.Offset, err)
		}
		key := string(topics.CalibrationKey(s.RunID, s.Stream))
		if string(r.Key) != key {
			return fmt.Errorf("%w: %s/%d offset %d: key %q does not match snapshot %s", ErrChangelog, r.Topic, r.Partition, r.Offset, r.Key, key)
		}
		if e := entry(key); e.snap.RunID == "" || s.Step >= e.snap.Step {
			e.snap, e.part = s, r.Partition
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrChangelog) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrChangelog, topic, err)
	}
	for k, e := range out {
		if e.snap.RunID == "" {
			return nil, fmt.Errorf("%w: %s: window chunks of %s without a snapshot", ErrChangelog, topic, k)
		}
	}
	return out, nil
}

// stateOf rebuilds the state a changelog entry describes and checks it against the snapshot's
// digest. legacy is true when the snapshot holds the full encoding (written before the head and
// chunk form): such a state's chunks are not in the changelog yet.
func (e *changelogState) stateOf() (st *correction.State, legacy bool, err error) {
	sn := &e.snap
	if correction.IsHead(sn.State) {
		win, err := windowFromChunks(sn.State, func(slot int, _ uint64) (topics.CalibrationChunk, bool) {
			ch, ok := e.chunks[slot]
			return ch, ok
		})
		if err != nil {
			return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
		}
		if st, err = correction.AssembleState(sn.State, win); err != nil {
			return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
		}
	} else {
		legacy = true
		if st, err = correction.DecodeState(sn.State); err != nil {
			return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
		}
	}
	sum, err := recordedDigest(st, sn.State)
	if err != nil {
		return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
	}
	if hex.EncodeToString(sum[:]) != sn.Digest {
		return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d: state bytes do not match its digest", ErrChangelog, sn.RunID, sn.Stream, sn.Step)
	}
	if st.Run() != sn.RunID || st.Stream() != sn.Stream || st.SealedStep() != sn.Step {
		return nil, false, fmt.Errorf("%w: snapshot %s/%s step %d holds state of %s/%s step %d", ErrChangelog,
			sn.RunID, sn.Stream, sn.Step, st.Run(), st.Stream(), st.SealedStep())
	}
	return st, legacy, nil
}

// recordedDigest returns st's digest under the definition its recorded form rec was written
// with: a full encoding (written before heads existed) and a version 1 head carry the SHA-256 of
// the full encoding, a newer head the chunked digest (correction.HeadDigestVersion).
func recordedDigest(st *correction.State, rec []byte) ([32]byte, error) {
	v := correction.DigestFlat
	if correction.IsHead(rec) {
		var err error
		if v, err = correction.HeadDigestVersion(rec); err != nil {
			return [32]byte{}, err
		}
	}
	return st.DigestAs(v)
}

// windowFromChunks collects the window pairs a head names from its chunks; chunk(slot, number)
// returns what is stored for chunk number in its slot (Redis stores by number, the changelog by
// slot).
func windowFromChunks(head []byte, chunk func(slot int, number uint64) (topics.CalibrationChunk, bool)) ([]byte, error) {
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

// RebuildFromChangelog reads the given partitions of the calibration topic and rebuilds every
// (run, stream) state they hold, as the consumer does on assignment (without Redis), each checked
// against its snapshot's digest. It serves benchmarks and tools.
func RebuildFromChangelog(ctx context.Context, kafkaOpts []kgo.Opt, names topics.Names, parts []int32, timeout time.Duration, log *slog.Logger) ([]*correction.State, error) {
	got, err := readChangelog(ctx, kafkaOpts, names.Calibration(), parts, timeout, log)
	if err != nil {
		return nil, err
	}
	out := make([]*correction.State, 0, len(got))
	for _, e := range got {
		st, _, err := e.stateOf()
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
