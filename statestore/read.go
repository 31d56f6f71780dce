package statestore

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// Head is the head record of one (run, stream).
type Head struct {
	SealedStep   int64
	Digest       string
	ConfigHash   string
	FitVersion   uint64
	AnchorWeight float64
	Pairs        int
	// FitX and FitY are the breakpoints of the calibration map of FitStep, the latest step whose
	// snapshot carried them (every mapEvery steps; nil: identity or none yet). The map in force
	// at SealedStep is in the state (ReadState).
	FitX, FitY []float64
	FitStep    int64
}

// Loaded is what Redis holds for one (run, stream) at the step the changelog names.
type Loaded struct {
	Head  *Head // nil: no head
	State []byte
	Has   bool // state key exists
}

// Load reads the heads and the state values at the given steps in one round trip.
func (s *Store) Load(ctx context.Context, want []*topics.CalibrationSnapshot) ([]Loaded, error) {
	if len(want) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	heads := make([]*redis.MapStringStringCmd, len(want))
	states := make([]*redis.StringCmd, len(want))
	for i, sn := range want {
		heads[i] = pipe.HGetAll(ctx, s.HeadKey(sn.RunID, sn.Stream))
		states[i] = pipe.Get(ctx, s.StateKey(sn.RunID, sn.Stream, sn.Step))
	}
	if err := s.exec(ctx, "state load", pipe); err != nil {
		return nil, err
	}
	out := make([]Loaded, len(want))
	for i := range want {
		if m, err := heads[i].Result(); err == nil && len(m) > 0 {
			h, err := parseHead(m)
			if err == nil {
				out[i].Head = h
			}
		}
		b, err := states[i].Bytes()
		if err == nil {
			out[i].State, out[i].Has = b, true
		}
	}
	return out, nil
}

func parseHead(m map[string]string) (*Head, error) {
	step, err := strconv.ParseInt(m[fieldSealedStep], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("head %s %q: %w", fieldSealedStep, m[fieldSealedStep], err)
	}
	h := &Head{SealedStep: step, Digest: m[fieldDigest], ConfigHash: m[fieldConfigHash], FitStep: -1}
	h.FitVersion, _ = strconv.ParseUint(m[fieldFitVersion], 10, 64)
	h.AnchorWeight, _ = strconv.ParseFloat(m[fieldAnchorWeight], 64)
	h.Pairs, _ = strconv.Atoi(m[fieldPairs])
	var f fitJSON
	if m[fieldFit] != "" && json.Unmarshal([]byte(m[fieldFit]), &f) == nil && len(f.X) > 0 {
		h.FitX, h.FitY = f.X, f.Y
		if v, err := strconv.ParseInt(m[fieldFitStep], 10, 64); err == nil {
			h.FitStep = v
		}
	}
	return h, nil
}

// ReadHead returns the head record of (run, stream); redis.Nil if there is none.
func (s *Store) ReadHead(ctx context.Context, run, stream string) (*Head, error) {
	m, err := s.rdb.HGetAll(ctx, s.HeadKey(run, stream)).Result()
	if err != nil {
		return nil, s.failed(ctx, err)
	}
	if len(m) == 0 {
		return nil, redis.Nil
	}
	return parseHead(m)
}

// ReadState returns the encoded state of (run, stream) sealed after step (decode it with
// correction.DecodeState); redis.Nil if it is not kept. It assembles the state from the step's
// head and the window chunks (two round trips) and checks it against the stored digest.
func (s *Store) ReadState(ctx context.Context, run, stream string, step int64) ([]byte, error) {
	v, err := s.rdb.Get(ctx, s.StateKey(run, stream, step)).Bytes()
	if err != nil {
		return nil, s.failed(ctx, err)
	}
	if len(v) < sha256.Size {
		return nil, fmt.Errorf("redis state %s: %d bytes, shorter than its digest", s.StateKey(run, stream, step), len(v))
	}
	head := v[sha256.Size:]
	first, n, _, err := correction.HeadWindow(head)
	if err != nil {
		return nil, fmt.Errorf("redis state %s: %w", s.StateKey(run, stream, step), err)
	}
	got := map[uint64]topics.CalibrationChunk{}
	if n > 0 {
		const c = correction.ChunkPairs
		lo, hi := first/c, (first+uint64(n)-1)/c
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, hi-lo+1)
		for k := lo; k <= hi; k++ {
			cmds = append(cmds, pipe.Get(ctx, s.keys(run, stream).chunk(k)))
		}
		if err := s.exec(ctx, "window chunks of "+run+"/"+stream, pipe); err != nil {
			return nil, err
		}
		for _, cmd := range cmds {
			b, err := cmd.Bytes()
			if err != nil {
				continue
			}
			ch, err := topics.DecodeCalibrationChunkValue(b, c)
			if err != nil {
				return nil, fmt.Errorf("redis window chunk of %s/%s: %w", run, stream, err)
			}
			got[ch.Chunk] = ch
		}
	}
	win, err := WindowFromChunks(head, func(_ int, k uint64) (topics.CalibrationChunk, bool) {
		ch, ok := got[k]
		return ch, ok
	})
	if err != nil {
		return nil, fmt.Errorf("redis state of %s/%s step %d: %w", run, stream, step, err)
	}
	st, err := correction.AssembleState(head, win)
	if err != nil {
		return nil, fmt.Errorf("redis state of %s/%s step %d: %w", run, stream, step, err)
	}
	if sum := st.Digest(); string(sum[:]) != string(v[:sha256.Size]) {
		return nil, fmt.Errorf("redis state of %s/%s step %d: assembled state does not match its digest", run, stream, step)
	}
	return st.Encode(), nil
}

// Streams lists the streams recorded for run.
func (s *Store) Streams(ctx context.Context, run string) ([]string, error) {
	m, err := s.rdb.SMembers(ctx, s.StreamsKey(run)).Result()
	return m, s.failed(ctx, err)
}
