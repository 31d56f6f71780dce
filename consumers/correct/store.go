package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// Store is the Redis side of the correction state: versioned snapshots per (run, stream) and a
// head record that other services read. Every key of one (run, stream) carries the hash tag
// {run/stream}, so a snapshot write is one script on one Redis Cluster slot. See the package
// documentation for the key layout.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	keep   int
}

// NewStore returns a store under prefix (e.g. "wmrl") that keeps the last keep snapshots.
func NewStore(rdb redis.UniversalClient, prefix string, keep int) *Store {
	return &Store{rdb: rdb, prefix: prefix, keep: keep}
}

func (s *Store) tag(run, stream string) string { return s.prefix + ":{" + run + "/" + stream + "}" }

// StateKey is the key of the state bytes of (run, stream) sealed after step.
func (s *Store) StateKey(run, stream string, step int64) string {
	return s.tag(run, stream) + ":state:" + strconv.FormatInt(step, 10)
}

// HeadKey is the hash with the latest sealed step of (run, stream).
func (s *Store) HeadKey(run, stream string) string { return s.tag(run, stream) + ":head" }

// StepsKey is the sorted set of the steps whose snapshots are kept.
func (s *Store) StepsKey(run, stream string) string { return s.tag(run, stream) + ":steps" }

// StreamsKey is the set of a run's streams (its own hash tag {run}).
func (s *Store) StreamsKey(run string) string { return s.prefix + ":{" + run + "}:streams" }

// writeScript stores one (run, stream) step idempotently: the state value (its digest and head)
// under the step, the window chunks the step changed under their chunk numbers, and the head
// hash. Returns {0} written, {1} identical content already present (or Redis is already past the
// step), {2, existing} different content already present (nothing is overwritten: the alarm
// case), {3} different content overwritten (ARGV[11] = "1": a repair of content the changelog
// proved wrong), {4} nothing written because Redis does not hold the previous step, so a delta
// would leave holes (ARGV[12] = "1" writes the whole window instead). Steps beyond the newest
// KEEP are deleted, and with them the chunks that no kept step's window reaches. Keys built from
// ARGV[7] share the hash tag of KEYS, so they live in the same cluster slot.
//
// KEYS: state:<v>, head, steps, lows (step → oldest chunk of its window), chunks (chunk numbers).
// ARGV: value, v, digest, config hash, fit version, keep, key prefix, fit JSON or "", anchor
// weight, pairs, force, full, oldest chunk of the window, then chunk number, chunk value pairs.
var writeScript = redis.NewScript(`
local v = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
local status = 0
if cur and cur == ARGV[1] then
  return {1}
elseif cur and ARGV[11] ~= '1' then
  return {2, cur}
end
if cur then status = 3 end
local head = redis.call('HGET', KEYS[2], 'sealed_step')
if ARGV[11] ~= '1' then
  if head and tonumber(head) >= v then return {1} end
  if ARGV[12] ~= '1' and ((not head) or tonumber(head) ~= v - 1) then return {4} end
end
for i = 14, #ARGV, 2 do
  redis.call('SET', ARGV[7] .. 'chunk:' .. ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[5], ARGV[i], ARGV[i])
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], v, v)
redis.call('ZADD', KEYS[4], ARGV[13], v)
if (not head) or tonumber(head) <= v or ARGV[11] == '1' then
  redis.call('HSET', KEYS[2], 'sealed_step', ARGV[2], 'digest', ARGV[3], 'config_hash', ARGV[4],
    'fit_version', ARGV[5], 'anchor_weight', ARGV[9], 'pairs', ARGV[10])
  if ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'fit', ARGV[8], 'fit_step', ARGV[2]) end
end
local keep = tonumber(ARGV[6])
local n = redis.call('ZCARD', KEYS[3])
if n > keep then
  local old = redis.call('ZRANGE', KEYS[3], 0, n - keep - 1)
  for _, s in ipairs(old) do
    redis.call('DEL', ARGV[7] .. 'state:' .. s)
    redis.call('ZREM', KEYS[4], s)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, n - keep - 1)
end
local low = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
if low[2] then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. low[2])
  for _, c in ipairs(dead) do redis.call('DEL', ARGV[7] .. 'chunk:' .. c) end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. low[2])
end
return {status}
`)

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

type fitJSON struct {
	X []float64 `json:"x"`
	Y []float64 `json:"y"`
}

// calWrite is one (run, stream) step to store: its snapshot, the window chunks the step changed,
// and the sealed state, which supplies every chunk when Redis needs the whole window.
type calWrite struct {
	snap   *topics.CalibrationSnapshot
	chunks []topics.CalibrationChunk
	st     *correction.State
	full   bool
}

// writeOutcome is the result of one snapshot write.
type writeOutcome struct {
	snap     *topics.CalibrationSnapshot
	status   int64
	existing string // digest of the different content found (status 2)
}

// Write statuses of writeScript.
const (
	statusWritten   = 0
	statusIdentical = 1
	statusDiffers   = 2
	statusRepaired  = 3
	statusNoBase    = 4
)

// write stores steps in one round trip (one pipeline of scripts, plus SADD for streams seen for
// the first time). A script cache miss (NOSCRIPT after a Redis restart) costs one more.
func (s *Store) write(ctx context.Context, ws []calWrite, newStreams map[string][]string) ([]writeOutcome, error) {
	return s.writeMode(ctx, ws, newStreams, false)
}

// writeForce is write for repairs: the states come from the changelog, which is the source of
// truth, so differing Redis content is replaced, with the whole window.
func (s *Store) writeForce(ctx context.Context, ws []calWrite, streams map[string][]string) ([]writeOutcome, error) {
	return s.writeMode(ctx, ws, streams, true)
}

func (s *Store) writeMode(ctx context.Context, ws []calWrite, newStreams map[string][]string, force bool) ([]writeOutcome, error) {
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
	if err != nil && isNoScript(err) {
		cmds, err = run(true)
	}
	if err != nil {
		return nil, fmt.Errorf("redis snapshot write: %w", err)
	}
	out := make([]writeOutcome, len(ws))
	for i, c := range cmds {
		sn := ws[i].snap
		res, err := c.Slice()
		if err != nil || len(res) == 0 {
			return nil, fmt.Errorf("redis snapshot write %s/%s step %d: unexpected reply %v: %w", sn.RunID, sn.Stream, sn.Step, res, err)
		}
		st, _ := res[0].(int64)
		out[i] = writeOutcome{snap: sn, status: st}
		if st == statusDiffers && len(res) > 1 {
			b, _ := res[1].(string)
			if len(b) >= sha256.Size && correction.IsHead([]byte(b[sha256.Size:])) {
				out[i].existing = hex.EncodeToString([]byte(b[:sha256.Size]))
			} else {
				sum := sha256.Sum256([]byte(b))
				out[i].existing = hex.EncodeToString(sum[:])
			}
		}
	}
	return out, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func (s *Store) writeArgs(w *calWrite, force bool) ([]string, []any) {
	sn := w.snap
	step := strconv.FormatInt(sn.Step, 10)
	var fit string
	if len(sn.BreakX) > 0 {
		b, _ := json.Marshal(fitJSON{X: sn.BreakX, Y: sn.BreakY})
		fit = string(b)
	}
	chunks := w.chunks
	full := w.full || force
	if full && w.st != nil {
		chunks = windowChunks(w.st, 0)
	}
	low := uint64(0)
	if w.st != nil {
		first, _ := w.st.WindowSpan()
		low = first / correction.ChunkPairs
	}
	tag := s.tag(sn.RunID, sn.Stream)
	keys := []string{s.StateKey(sn.RunID, sn.Stream, sn.Step), s.HeadKey(sn.RunID, sn.Stream), s.StepsKey(sn.RunID, sn.Stream),
		tag + ":lows", tag + ":chunks"}
	args := make([]any, 0, 13+2*len(chunks))
	args = append(args, redisValue(sn), step, sn.Digest, sn.ConfigHash, strconv.FormatUint(sn.FitVersion, 10), s.keep,
		tag+":", fit, strconv.FormatFloat(sn.AnchorWeight, 'g', -1, 64), sn.Pairs, boolArg(force), boolArg(full),
		strconv.FormatUint(low, 10))
	for _, ch := range chunks {
		args = append(args, strconv.FormatUint(ch.Chunk, 10), topics.EncodeCalibrationChunk(ch))
	}
	return keys, args
}

// redisValue is what Redis stores under state:<v>: the raw digest and the head, so a reader can
// check the state it assembles from the head and the chunks. A snapshot holding a full
// encoding (written before heads existed) is stored as it is.
func redisValue(sn *topics.CalibrationSnapshot) []byte {
	if !correction.IsHead(sn.State) {
		return sn.State
	}
	d, err := hex.DecodeString(sn.Digest)
	if err != nil || len(d) != sha256.Size {
		d = make([]byte, sha256.Size)
	}
	return append(d, sn.State...)
}

// loaded is what Redis holds for one (run, stream) at the step the changelog names.
type loaded struct {
	head  *Head // nil: no head
	state []byte
	has   bool // state key exists
}

// load reads the heads and the state values at the given steps in one round trip.
func (s *Store) load(ctx context.Context, want []*topics.CalibrationSnapshot) ([]loaded, error) {
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
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis state load: %w", err)
	}
	out := make([]loaded, len(want))
	for i := range want {
		if m, err := heads[i].Result(); err == nil && len(m) > 0 {
			h, err := parseHead(m)
			if err == nil {
				out[i].head = h
			}
		}
		b, err := states[i].Bytes()
		if err == nil {
			out[i].state, out[i].has = b, true
		}
	}
	return out, nil
}

func parseHead(m map[string]string) (*Head, error) {
	step, err := strconv.ParseInt(m["sealed_step"], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("head sealed_step %q: %w", m["sealed_step"], err)
	}
	h := &Head{SealedStep: step, Digest: m["digest"], ConfigHash: m["config_hash"], FitStep: -1}
	h.FitVersion, _ = strconv.ParseUint(m["fit_version"], 10, 64)
	h.AnchorWeight, _ = strconv.ParseFloat(m["anchor_weight"], 64)
	h.Pairs, _ = strconv.Atoi(m["pairs"])
	var f fitJSON
	if m["fit"] != "" && json.Unmarshal([]byte(m["fit"]), &f) == nil && len(f.X) > 0 {
		h.FitX, h.FitY = f.X, f.Y
		if v, err := strconv.ParseInt(m["fit_step"], 10, 64); err == nil {
			h.FitStep = v
		}
	}
	return h, nil
}

// ReadHead returns the head record of (run, stream); redis.Nil if there is none.
func (s *Store) ReadHead(ctx context.Context, run, stream string) (*Head, error) {
	m, err := s.rdb.HGetAll(ctx, s.HeadKey(run, stream)).Result()
	if err != nil {
		return nil, err
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
		return nil, err
	}
	if len(v) < sha256.Size || !correction.IsHead(v[sha256.Size:]) {
		return v, nil
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
			cmds = append(cmds, pipe.Get(ctx, s.tag(run, stream)+":chunk:"+strconv.FormatUint(k, 10)))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redis window chunks of %s/%s: %w", run, stream, err)
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
	win, err := windowFromChunks(head, func(_ int, k uint64) (topics.CalibrationChunk, bool) {
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
	sum, err := recordedDigest(st, head)
	if err != nil {
		return nil, fmt.Errorf("redis state of %s/%s step %d: %w", run, stream, step, err)
	}
	if string(sum[:]) != string(v[:sha256.Size]) {
		return nil, fmt.Errorf("redis state of %s/%s step %d: assembled state does not match its digest", run, stream, step)
	}
	return st.Encode(), nil
}

// Streams lists the streams recorded for run.
func (s *Store) Streams(ctx context.Context, run string) ([]string, error) {
	return s.rdb.SMembers(ctx, s.StreamsKey(run)).Result()
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// writeRedisAsync writes the committed snapshots on a goroutine, then calls OnCommit, so the
// Redis round trip overlaps with polling and decoding the next records. At most one write is in
// flight (a new one waits for the previous, which keeps the writes in commit order), and
// waitRedis joins it before state is reloaded from Redis and before Run returns.
func (c *Consumer) writeRedisAsync(snaps []*topics.CalibrationSnapshot, done []*sealed, infos []SealedStep) {
	c.waitRedis()
	ch := make(chan struct{})
	c.redisDone = ch
	go func() {
		defer close(ch)
		c.writeRedis(snaps, done)
		if c.cfg.OnCommit != nil && len(infos) > 0 {
			c.cfg.OnCommit(infos)
		}
	}()
}

// waitRedis blocks until the Redis write in flight (if any) has finished.
func (c *Consumer) waitRedis() {
	if c.redisDone != nil {
		<-c.redisDone
		c.redisDone = nil
	}
}

// writeRedis stores the committed snapshots (one round trip). Failures only cost a rebuild
// from the changelog later; a differing digest for a stored step is an alarm. A step whose
// predecessor Redis does not hold (Redis lost its data) is written again with its whole window,
// and its run's streams set is re-added: a second round trip, only then.
func (c *Consumer) writeRedis(_ []*topics.CalibrationSnapshot, done []*sealed) {
	ws, newStreams := sealedWrites(done)
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.store.write(ctx, ws, newStreams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis snapshot write failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
	var again []calWrite
	streams := map[string][]string{}
	for i, o := range res {
		if o.status != statusNoBase {
			continue
		}
		w := ws[i]
		w.full = true
		again = append(again, w)
		if !slices.Contains(streams[w.snap.RunID], w.snap.Stream) {
			streams[w.snap.RunID] = append(streams[w.snap.RunID], w.snap.Stream)
		}
	}
	if len(again) == 0 {
		return
	}
	c.m.redisLost.Add(float64(len(again)))
	c.log.Warn("redis does not hold the previous step of some streams (data lost?); writing their whole windows",
		"streams", len(again), "runs", len(streams))
	res, err = c.store.write(ctx, again, streams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis full rewrite failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
}

// sealedWrites returns the Redis writes of sealed steps and their streams seen for the first time.
func sealedWrites(done []*sealed) ([]calWrite, map[string][]string) {
	var ws []calWrite
	newStreams := map[string][]string{}
	for _, s := range done {
		for i := range s.snaps {
			// A stream's first step has no predecessor in Redis; its chunks are its whole window.
			fresh := slices.Contains(s.newStream, s.snaps[i].Stream)
			ws = append(ws, calWrite{snap: &s.snaps[i], chunks: s.chunks[i], st: s.states[i], full: fresh})
		}
		if len(s.newStream) > 0 {
			newStreams[s.run] = append(newStreams[s.run], s.newStream...)
		}
	}
	return ws, newStreams
}

func (c *Consumer) alarms(res []writeOutcome) {
	for _, o := range res {
		if o.status == statusDiffers {
			c.m.digestAlarms.Inc()
			c.log.Error("ALARM: Redis holds a different state for an already sealed step",
				"run", o.snap.RunID, "stream", o.snap.Stream, "step", o.snap.Step,
				"digest", o.snap.Digest, "redis_digest", o.existing, "key", c.store.StateKey(o.snap.RunID, o.snap.Stream, o.snap.Step))
		}
	}
}
