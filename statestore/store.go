package statestore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// DefaultPrefix is the key prefix of the live state (`wmrl correct --redis-prefix`).
const DefaultPrefix = "wmrl"

// Store reads and writes the state of every (run, stream) under one key prefix. Any
// redis.UniversalClient works: a single node, a Redis Cluster or a Sentinel-managed master.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	keep   int
}

// New returns a store under prefix (e.g. DefaultPrefix) that keeps the last keep snapshots.
func New(rdb redis.UniversalClient, prefix string, keep int) *Store {
	return &Store{rdb: rdb, prefix: prefix, keep: keep}
}

// failed passes err through; a failure other than a missing key makes a cluster client reload
// its slot map. go-redis keeps routing a slot to a master that no longer answers (a dead node
// sends no MOVED) until its periodic reload, 60 s by default; after a failover the next write
// or read then reaches the promoted replica.
func (s *Store) failed(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
	return err
}

// writeScript stores one (run, stream) step idempotently: the state value (its digest and head)
// under the step, the window chunks the step changed under their chunk numbers, and the head
// hash. It replies {Status} or, for Differs, {Differs, the value found}: nothing is overwritten
// unless argForce says the changelog proved the content wrong, and a delta is not written on a
// Redis that lacks the previous step (NoBase) unless argFull says the chunks are the whole
// window. Steps beyond the newest argKeep are deleted, and with them the chunks that no kept
// step's window reaches. The state and chunk keys it builds from argStatePrefix and
// argChunkPrefix (keys.go) share the hash tag of KEYS, so they live in the same cluster slot.
//
//go:embed write.lua
var writeLua string

var writeScript = redis.NewScript(writeLua)

// KEYS of writeScript.
const (
	keyState = iota
	keyHead
	keySteps
	keyLows
	keyChunks
	numKeys
)

// ARGV slots of writeScript (0-based here, ARGV[i+1] in Lua); the head hash's field, value
// pairs (headArgs) follow from argHead on, then chunk number, chunk value pairs.
const (
	argValue       = iota // state value (redisValue)
	argKeep               // steps to keep
	argStatePrefix        // key of a state without its step (streamKeys.statePrefix)
	argChunkPrefix        // key of a chunk without its number (streamKeys.chunkPrefix)
	argForce              // "1": overwrite differing content (repair)
	argFull               // "1": the chunks are the whole window
	argLowChunk           // oldest chunk of the window
	argHeadLen            // number of head arguments
	argHead
)

// Fields of the head hash (doc.go): headArgs writes them, parseHead reads them.
const (
	fieldSealedStep   = "sealed_step"
	fieldDigest       = "digest"
	fieldConfigHash   = "config_hash"
	fieldFitVersion   = "fit_version"
	fieldAnchorWeight = "anchor_weight"
	fieldPairs        = "pairs"
	fieldFit          = "fit"
	fieldFitStep      = "fit_step"
)

// Status is the result of writing one step.
type Status int64

// Write statuses of writeScript.
const (
	// Written: the step is stored.
	Written Status = iota
	// Identical: the same content was already present, or Redis is already past the step.
	Identical
	// Differs: different content is present and was left alone (the alarm case).
	Differs
	// Repaired: different content was overwritten (a forced write).
	Repaired
	// NoBase: nothing was written because Redis does not hold the previous step, so a delta
	// would leave holes; write again with Full.
	NoBase
)

// Write is one (run, stream) step to store: its snapshot, the window chunks the step changed,
// and the sealed state, which supplies every chunk when Redis needs the whole window.
type Write struct {
	Snap   *topics.CalibrationSnapshot
	Chunks []Chunk
	State  *correction.State
	Full   bool
}

// Outcome is the result of one snapshot write.
type Outcome struct {
	Snap   *topics.CalibrationSnapshot
	Status Status
	// Existing is the digest of the different content found (Differs).
	Existing string
}

type fitJSON struct {
	X []float64 `json:"x"`
	Y []float64 `json:"y"`
}

// Write stores steps in one round trip (one pipeline of scripts, plus SADD for streams seen for
// the first time). A script cache miss (NOSCRIPT after a Redis restart) costs one more.
func (s *Store) Write(ctx context.Context, ws []Write, newStreams map[string][]string) ([]Outcome, error) {
	return s.write(ctx, ws, newStreams, false)
}

// WriteForce is Write for repairs: the states come from the changelog, which is the source of
// truth, so differing Redis content is replaced, with the whole window.
func (s *Store) WriteForce(ctx context.Context, ws []Write, streams map[string][]string) ([]Outcome, error) {
	return s.write(ctx, ws, streams, true)
}

func (s *Store) write(ctx context.Context, ws []Write, newStreams map[string][]string, force bool) ([]Outcome, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	run := func(eval bool) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(ws))
		for i := range ws {
			keys, args := s.writeArgs(&ws[i], force)
			if eval {
				cmds[i] = writeScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = writeScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		for r, streams := range newStreams {
			if len(streams) == 0 {
				continue
			}
			members := make([]any, len(streams))
			for i, st := range streams {
				members[i] = st
			}
			pipe.SAdd(ctx, s.StreamsKey(r), members...)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(false)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = run(true)
	}
	if err != nil {
		return nil, fmt.Errorf("redis snapshot write: %w", s.failed(ctx, err))
	}
	out := make([]Outcome, len(ws))
	for i, c := range cmds {
		sn := ws[i].Snap
		res, err := c.Slice()
		if err != nil || len(res) == 0 {
			return nil, fmt.Errorf("redis snapshot write %s/%s step %d: unexpected reply %v: %w", sn.RunID, sn.Stream, sn.Step, res, err)
		}
		st, _ := res[0].(int64)
		out[i] = Outcome{Snap: sn, Status: Status(st)}
		if Status(st) == Differs && len(res) > 1 {
			b, _ := res[1].(string)
			if len(b) >= sha256.Size {
				out[i].Existing = hex.EncodeToString([]byte(b[:sha256.Size]))
			}
		}
	}
	return out, nil
}

func (s *Store) writeArgs(w *Write, force bool) ([]string, []any) {
	sn := w.Snap
	chunks := w.Chunks
	full := w.Full || force
	if full && w.State != nil {
		chunks = WindowChunks(w.State, 0)
	}
	low := uint64(0)
	if w.State != nil {
		first, _ := w.State.WindowSpan()
		low = first / correction.ChunkPairs
	}
	k := s.keys(sn.RunID, sn.Stream)
	keys := make([]string, numKeys)
	keys[keyState] = k.state(sn.Step)
	keys[keyHead] = k.head()
	keys[keySteps] = k.steps()
	keys[keyLows] = k.lows()
	keys[keyChunks] = k.chunks()
	head := headArgs(sn)
	args := make([]any, argHead, argHead+len(head)+2*len(chunks))
	args[argValue] = RedisValue(sn)
	args[argKeep] = s.keep
	args[argStatePrefix] = k.statePrefix()
	args[argChunkPrefix] = k.chunkPrefix()
	args[argForce] = boolArg(force)
	args[argFull] = boolArg(full)
	args[argLowChunk] = strconv.FormatUint(low, 10)
	args[argHeadLen] = len(head)
	args = append(args, head...)
	for _, ch := range chunks {
		args = append(args, strconv.FormatUint(ch.Chunk, 10), ch.Value)
	}
	return keys, args
}

// headArgs is the head hash of sn as field, value pairs, the sealed step first; the fit and its
// step only when sn carries breakpoints, so the head keeps the latest fit otherwise.
func headArgs(sn *topics.CalibrationSnapshot) []any {
	step := strconv.FormatInt(sn.Step, 10)
	head := []any{fieldSealedStep, step, fieldDigest, sn.Digest, fieldConfigHash, sn.ConfigHash,
		fieldFitVersion, strconv.FormatUint(sn.FitVersion, 10),
		fieldAnchorWeight, strconv.FormatFloat(sn.AnchorWeight, 'g', -1, 64), fieldPairs, sn.Pairs}
	if len(sn.BreakX) > 0 {
		b, _ := json.Marshal(fitJSON{X: sn.BreakX, Y: sn.BreakY})
		head = append(head, fieldFit, string(b), fieldFitStep, step)
	}
	return head
}

// RedisValue is what Redis stores under state:<v>: the raw digest and the head, so a reader can
// check the state it assembles from the head and the chunks.
func RedisValue(sn *topics.CalibrationSnapshot) []byte {
	d, err := hex.DecodeString(sn.Digest)
	if err != nil || len(d) != sha256.Size {
		d = make([]byte, sha256.Size)
	}
	return append(d, sn.State...)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// LoadScript loads the write script into the script cache (of every master of a cluster), so
// the first write is not a NOSCRIPT miss. Writes reload it themselves when it is missing.
func (s *Store) LoadScript(ctx context.Context) error {
	return writeScript.Load(ctx, s.rdb).Err()
}
