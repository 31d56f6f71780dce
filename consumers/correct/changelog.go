package correct

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// mapEvery is how often (in steps) a snapshot carries the fit's breakpoints for dashboards and
// analytics. The state itself never needs them in the changelog: its head either includes them
// or they are refitted from the window on rebuild.
const mapEvery = 64

// calibrationRecords appends a sealed step's changelog records to recs: per stream, the window
// chunks the step changed, then the snapshot (whose state is the head), all on the run's partition.
func calibrationRecords(names topics.Names, s *sealed, recs []*kgo.Record) ([]*kgo.Record, error) {
	for i := range s.snaps {
		for _, ch := range s.chunks[i] {
			r, err := names.EncodedCalibrationChunkRecord(ch.CalibrationChunk, ch.Value)
			if err != nil {
				return nil, fmt.Errorf("correct: run %s step %d: %w", s.run, s.step, err)
			}
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

// changelogEnd is an ended run's end record and partition (retention.go).
type changelogEnd struct {
	end  topics.CalibrationEnd
	part int32
}

// changelog is what readChangelog found: per calibration key the latest snapshot and chunks, and
// per ended run its end. Tombstoned keys are absent.
type changelog struct {
	states map[string]*changelogState
	ends   map[string]changelogEnd
}

// slotsOf returns, per stream of run, the chunk slots the changelog holds (the highest slot + 1).
func (l *changelog) slotsOf(run string) map[string]int {
	out := map[string]int{}
	for _, e := range l.states {
		if e.snap.RunID != run {
			continue
		}
		n := 0
		for slot := range e.chunks {
			n = max(n, slot+1)
		}
		out[e.snap.Stream] = n
	}
	return out
}

// readChangelog returns, per calibration key, the latest snapshot and chunks in the given
// partitions of names' calibration topic, and the ends of the ended runs. A tombstone (nil value)
// removes its key. Records are decoded by content-type (binary, or framed Protobuf when the
// writer had a registry), so a restart may switch between the two.
func readChangelog(ctx context.Context, opts []kgo.Opt, names topics.Names, parts []int32, timeout time.Duration, log *slog.Logger) (*changelog, error) {
	topic := names.Calibration()
	out := map[string]*changelogState{}
	ends := map[string]changelogEnd{}
	if len(parts) == 0 {
		return &changelog{states: out, ends: ends}, nil
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
		if r.Value == nil {
			tombstone(out, ends, r.Key)
			return nil
		}
		if topics.IsCalibrationEnd(r) {
			end, err := names.DecodeCalibrationEndRecord(ctx, r)
			if err == nil && string(r.Key) != string(topics.CalibrationEndKey(end.RunID)) {
				err = fmt.Errorf("key %q does not match the end of run %s", r.Key, end.RunID)
			}
			if err != nil {
				return fmt.Errorf("%w: %s/%d offset %d: %w", ErrChangelog, r.Topic, r.Partition, r.Offset, err)
			}
			ends[end.RunID] = changelogEnd{end: end, part: r.Partition}
			return nil
		}
		if topics.IsCalibrationChunk(r) {
			ch, err := names.DecodeCalibrationChunkRecord(ctx, r, correction.ChunkPairs)
			if err != nil {
				return fmt.Errorf("%w: %s/%d offset %d: %w", ErrChangelog, r.Topic, r.Partition, r.Offset, err)
			}
			// A copy, so that the fetched batch the value points into can be freed.
			ch.Pairs = append([]byte(nil), ch.Pairs...)
			entry(string(topics.CalibrationKey(ch.RunID, ch.Stream))).chunks[ch.Slot] = ch
			return nil
		}
		s, err := names.DecodeCalibrationRecord(ctx, r)
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
	return &changelog{states: out, ends: ends}, nil
}

// tombstone removes what a tombstone's key names: a chunk slot, a (run, stream)'s snapshot and
// chunks, or a run's end. The tombstones of a run are written chunks first, so a snapshot never
// loses its chunks before its own tombstone.
func tombstone(states map[string]*changelogState, ends map[string]changelogEnd, key []byte) {
	parts := strings.Split(string(key), "/")
	switch len(parts) {
	case 1:
		delete(ends, parts[0])
	case 2:
		delete(states, string(key))
	case 3:
		k := parts[0] + "/" + parts[1]
		e := states[k]
		if e == nil {
			return
		}
		if slot, err := strconv.Atoi(parts[2]); err == nil {
			delete(e.chunks, slot)
		}
		if e.snap.RunID == "" && len(e.chunks) == 0 {
			delete(states, k)
		}
	}
}

// stateOf rebuilds the state a changelog entry describes (its snapshot's head joined with its
// window chunks) and checks it against the snapshot's digest.
func (e *changelogState) stateOf() (*correction.State, error) {
	sn := &e.snap
	st, err := e.assemble()
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s/%s step %d: %w", ErrChangelog, sn.RunID, sn.Stream, sn.Step, err)
	}
	if sum := st.Digest(); hex.EncodeToString(sum[:]) != sn.Digest {
		return nil, fmt.Errorf("%w: snapshot %s/%s step %d: state bytes do not match its digest", ErrChangelog, sn.RunID, sn.Stream, sn.Step)
	}
	if st.Run() != sn.RunID || st.Stream() != sn.Stream || st.SealedStep() != sn.Step {
		return nil, fmt.Errorf("%w: snapshot %s/%s step %d holds state of %s/%s step %d", ErrChangelog,
			sn.RunID, sn.Stream, sn.Step, st.Run(), st.Stream(), st.SealedStep())
	}
	return st, nil
}

func (e *changelogState) assemble() (*correction.State, error) {
	win, err := statestore.WindowFromChunks(e.snap.State, func(slot int, _ uint64) (topics.CalibrationChunk, bool) {
		ch, ok := e.chunks[slot]
		return ch, ok
	})
	if err != nil {
		return nil, err
	}
	return correction.AssembleState(e.snap.State, win)
}

// RebuildFromChangelog reads the given partitions of the calibration topic and rebuilds every
// (run, stream) state of a run that has not ended, as the consumer does on assignment (without Redis), each checked
// against its snapshot's digest. It serves benchmarks and tools.
func RebuildFromChangelog(ctx context.Context, kafkaOpts []kgo.Opt, names topics.Names, parts []int32, timeout time.Duration, log *slog.Logger) ([]*correction.State, error) {
	got, err := readChangelog(ctx, kafkaOpts, names, parts, timeout, log)
	if err != nil {
		return nil, err
	}
	out := make([]*correction.State, 0, len(got.states))
	for _, e := range got.states {
		if _, ended := got.ends[e.snap.RunID]; ended {
			continue
		}
		st, err := e.stateOf()
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
