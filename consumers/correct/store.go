package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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

// writeScript stores one snapshot idempotently. Returns {0} written, {1} identical content
// already present, {2, existing} different content already present (nothing is overwritten:
// the alarm case), {3} different content overwritten (ARGV[11] = "1": a repair of content the
// changelog proved wrong). The head only moves forward; snapshots beyond the newest KEEP are deleted.
// Trimmed state keys are built from ARGV[7]; they share the hash tag of KEYS, so they live in
// the same cluster slot.
var writeScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local status = 0
if cur and cur == ARGV[1] then
  status = 1
elseif cur and ARGV[11] ~= '1' then
  return {2, cur}
else
  if cur then status = 3 end
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[2])
local head = redis.call('HGET', KEYS[2], 'sealed_step')
if (not head) or tonumber(head) <= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[2], 'sealed_step', ARGV[2], 'digest', ARGV[3], 'config_hash', ARGV[4],
    'fit_version', ARGV[5], 'fit', ARGV[8], 'anchor_weight', ARGV[9], 'pairs', ARGV[10])
end
local keep = tonumber(ARGV[6])
local n = redis.call('ZCARD', KEYS[3])
if n > keep then
  local old = redis.call('ZRANGE', KEYS[3], 0, n - keep - 1)
  for _, v in ipairs(old) do redis.call('DEL', ARGV[7] .. v) end
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, n - keep - 1)
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
	// FitX and FitY are the breakpoints of the calibration map in force (nil: identity).
	FitX, FitY []float64
}

type fitJSON struct {
	X []float64 `json:"x"`
	Y []float64 `json:"y"`
}

// writeOutcome is the result of one snapshot write.
type writeOutcome struct {
	snap     *topics.CalibrationSnapshot
	status   int64
	existing string // digest of the different content found (status 2)
}

// write stores snapshots in one round trip (one pipeline of scripts, plus SADD for streams seen
// for the first time). A script cache miss (NOSCRIPT after a Redis restart) costs one more.
func (s *Store) write(ctx context.Context, snaps []*topics.CalibrationSnapshot, newStreams map[string][]string) ([]writeOutcome, error) {
	return s.writeMode(ctx, snaps, newStreams, false)
}

// writeForce is write for repairs: the snapshots come from the changelog, which is the source of
// truth, so differing Redis content is replaced.
func (s *Store) writeForce(ctx context.Context, snaps []*topics.CalibrationSnapshot) ([]writeOutcome, error) {
	return s.writeMode(ctx, snaps, nil, true)
}

func (s *Store) writeMode(ctx context.Context, snaps []*topics.CalibrationSnapshot, newStreams map[string][]string, force bool) ([]writeOutcome, error) {
	if len(snaps) == 0 {
		return nil, nil
	}
	run := func(eval bool) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(snaps))
		for i, sn := range snaps {
			keys, args := s.writeArgs(sn, force)
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
	out := make([]writeOutcome, len(snaps))
	for i, c := range cmds {
		res, err := c.Slice()
		if err != nil || len(res) == 0 {
			return nil, fmt.Errorf("redis snapshot write %s/%s step %d: unexpected reply %v: %w", snaps[i].RunID, snaps[i].Stream, snaps[i].Step, res, err)
		}
		st, _ := res[0].(int64)
		out[i] = writeOutcome{snap: snaps[i], status: st}
		if st == 2 && len(res) > 1 {
			b, _ := res[1].(string)
			sum := sha256.Sum256([]byte(b))
			out[i].existing = hex.EncodeToString(sum[:])
		}
	}
	return out, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func (s *Store) writeArgs(sn *topics.CalibrationSnapshot, force bool) ([]string, []any) {
	step := strconv.FormatInt(sn.Step, 10)
	fit, _ := json.Marshal(fitJSON{X: nonNil(sn.BreakX), Y: nonNil(sn.BreakY)})
	keys := []string{s.StateKey(sn.RunID, sn.Stream, sn.Step), s.HeadKey(sn.RunID, sn.Stream), s.StepsKey(sn.RunID, sn.Stream)}
	args := []any{sn.State, step, sn.Digest, sn.ConfigHash, strconv.FormatUint(sn.FitVersion, 10), s.keep,
		s.tag(sn.RunID, sn.Stream) + ":state:", string(fit), strconv.FormatFloat(sn.AnchorWeight, 'g', -1, 64), sn.Pairs, boolArg(force)}
	return keys, args
}

func nonNil(x []float64) []float64 {
	if x == nil {
		return []float64{}
	}
	return x
}

// loaded is what Redis holds for one (run, stream) at the step the changelog names.
type loaded struct {
	head  *Head // nil: no head
	state []byte
	has   bool // state key exists
}

// load reads the heads and the state bytes at the given steps in one round trip.
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
	h := &Head{SealedStep: step, Digest: m["digest"], ConfigHash: m["config_hash"]}
	h.FitVersion, _ = strconv.ParseUint(m["fit_version"], 10, 64)
	h.AnchorWeight, _ = strconv.ParseFloat(m["anchor_weight"], 64)
	h.Pairs, _ = strconv.Atoi(m["pairs"])
	var f fitJSON
	if m["fit"] != "" && json.Unmarshal([]byte(m["fit"]), &f) == nil && len(f.X) > 0 {
		h.FitX, h.FitY = f.X, f.Y
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
// correction.DecodeState); redis.Nil if it is not kept.
func (s *Store) ReadState(ctx context.Context, run, stream string, step int64) ([]byte, error) {
	return s.rdb.Get(ctx, s.StateKey(run, stream, step)).Bytes()
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
// from the changelog later; a differing digest for a stored step is an alarm.
func (c *Consumer) writeRedis(snaps []*topics.CalibrationSnapshot, done []*sealed) {
	if len(snaps) == 0 {
		return
	}
	newStreams := map[string][]string{}
	for _, s := range done {
		if len(s.newStream) > 0 {
			newStreams[s.run] = append(newStreams[s.run], s.newStream...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.store.write(ctx, snaps, newStreams)
	if err != nil {
		c.m.redisErrors.Inc()
		c.log.Warn("redis snapshot write failed (state stays recoverable from the changelog)", "err", err)
		return
	}
	c.alarms(res)
}

func (c *Consumer) alarms(res []writeOutcome) {
	for _, o := range res {
		if o.status == 2 {
			c.m.digestAlarms.Inc()
			c.log.Error("ALARM: Redis holds a different state for an already sealed step",
				"run", o.snap.RunID, "stream", o.snap.Stream, "step", o.snap.Step,
				"digest", o.snap.Digest, "redis_digest", o.existing, "key", c.store.StateKey(o.snap.RunID, o.snap.Stream, o.snap.Step))
		}
	}
}
