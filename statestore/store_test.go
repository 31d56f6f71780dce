package statestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// sealedStates returns the states of one (run, stream) sealed after steps 0..n−1 of a workload
// with 12 anchor pairs per step and a 300-pair window, so the window fills and slides.
func sealedStates(t *testing.T, n int) []*correction.State {
	t.Helper()
	cfg := correction.DefaultConfig()
	cfg.Window, cfg.MinPairs = 300, 20
	c, err := correction.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := c.NewState("r", "s")
	var out []*correction.State
	for v := range n {
		var groups []correction.Group
		for g := range 3 {
			grp := correction.Group{ID: fmt.Sprintf("g%d", g), Anchor: g < 2}
			for k := range 6 {
				x := float64((v*7+g*5+k*3)%20) / 20
				grp.Rollouts = append(grp.Rollouts, correction.Rollout{ID: fmt.Sprintf("r%d", k),
					Predicted: correction.Reward{Score: x, OK: true}, Executed: correction.Reward{Score: x * x, OK: true}})
			}
			groups = append(groups, grp)
		}
		_, next, err := c.Correct(st, correction.Step{Run: "r", Stream: "s", Step: int64(v), Groups: groups})
		if err != nil {
			t.Fatal(err)
		}
		st = next
		out = append(out, st)
	}
	return out
}

// storeWrite is the write a consumer makes for state st sealed after prev.
func storeWrite(st, prev *correction.State, full bool) Write {
	var prevTotal uint64
	if prev != nil {
		prevTotal = prev.TotalPairs()
	}
	d := st.Digest()
	sn := &topics.CalibrationSnapshot{RunID: st.Run(), Stream: st.Stream(), Step: st.SealedStep(), State: st.EncodeHead(),
		Digest: hex.EncodeToString(d[:]), FitVersion: st.FitVersion(), Pairs: st.Pairs()}
	return Write{Snap: sn, Chunks: WindowChunks(st, prevTotal), State: st, Full: full}
}

func TestStoreDeltaWrites(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	const keep = 3
	s := New(rdb, "p", keep)
	ctx := context.Background()
	states := sealedStates(t, 60)
	write := func(w Write, force bool) Status {
		t.Helper()
		var res []Outcome
		var err error
		if force {
			res, err = s.WriteForce(ctx, []Write{w}, map[string][]string{"r": {"s"}})
		} else {
			res, err = s.Write(ctx, []Write{w}, map[string][]string{"r": {"s"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Status
	}
	for v, st := range states {
		var prev *correction.State
		if v > 0 {
			prev = states[v-1]
		}
		if got := write(storeWrite(st, prev, v == 0), false); got != Written {
			t.Fatalf("step %d: status %d", v, got)
		}
	}
	last := len(states) - 1
	for v := last - keep + 1; v <= last; v++ {
		b, err := s.ReadState(ctx, "r", "s", int64(v))
		if err != nil {
			t.Fatalf("state %d: %v", v, err)
		}
		if !bytes.Equal(b, states[v].Encode()) {
			t.Fatalf("state %d read back differs from the sealed state", v)
		}
	}
	if _, err := s.ReadState(ctx, "r", "s", int64(last-keep)); !errors.Is(err, redis.Nil) {
		t.Fatalf("state %d should be trimmed (keep %d): %v", last-keep, keep, err)
	}
	// Only the chunks the kept steps' windows reach are left.
	first, _ := states[last-keep+1].WindowSpan()
	for _, k := range mr.Keys() {
		if i := strings.LastIndex(k, ":chunk:"); i >= 0 {
			if c, _ := strconv.ParseUint(k[i+len(":chunk:"):], 10, 64); c < first/correction.ChunkPairs {
				t.Fatalf("chunk key %s outlived every kept window (oldest needed %d)", k, first/correction.ChunkPairs)
			}
		}
	}
	h, err := s.ReadHead(ctx, "r", "s")
	if err != nil || h.SealedStep != int64(last) || h.Digest != storeWrite(states[last], nil, false).Snap.Digest {
		t.Fatalf("head %+v %v", h, err)
	}

	for _, tc := range []struct {
		name  string
		w     Write
		force bool
		want  Status
	}{
		{"identical rewrite", storeWrite(states[last], states[last-1], false), false, Identical},
		{"older step never moves the head back", storeWrite(states[last-keep-1], states[last-keep-2], false), false, Identical},
		{"different content for a kept step", storeWrite(states[last-2], states[last-3], false), false, Differs},
		{"forced repair", storeWrite(states[last-2], states[last-3], true), true, Repaired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w
			if tc.want >= Differs {
				// Different content: another state of a kept step.
				w.Snap.State = states[last-1].EncodeHead()
			}
			if got := write(w, tc.force); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	if h, _ := s.ReadHead(ctx, "r", "s"); h.SealedStep != int64(last-2) {
		t.Fatalf("a forced repair sets the head to the changelog's step: %d", h.SealedStep)
	}

	// Redis loses its data: a delta write is refused, a whole-window write restores the state.
	mr.FlushAll()
	next := sealedStates(t, len(states)+1)[len(states)]
	if got := write(storeWrite(next, states[last], false), false); got != NoBase {
		t.Fatalf("delta write after FLUSHALL: status %d, want %d", got, NoBase)
	}
	if got := write(storeWrite(next, states[last], true), false); got != Written {
		t.Fatalf("whole-window write after FLUSHALL: status %d", got)
	}
	b, err := s.ReadState(ctx, "r", "s", next.SealedStep())
	if err != nil || !bytes.Equal(b, next.Encode()) {
		t.Fatalf("state after the whole-window write: %v", err)
	}
	if streams, _ := s.Streams(ctx, "r"); len(streams) != 1 {
		t.Fatalf("streams set %v", streams)
	}
	for _, k := range []string{s.HeadKey("r", "s"), s.StateKey("r", "s", 2), s.StepsKey("r", "s")} {
		if !strings.Contains(k, "{r/s}") {
			t.Fatalf("key %s lacks the {run/stream} hash tag", k)
		}
	}
}

// TestStoreRefusesOtherForms: Redis holds one form of a state, the digest and the current head;
// ReadState refuses another head version, a digest that does not match, and a full encoding.
func TestStoreRefusesOtherForms(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := New(rdb, "p", 3)
	ctx := context.Background()
	st := sealedStates(t, 31)[30]
	w := storeWrite(st, nil, true)
	if res, err := s.Write(ctx, []Write{w}, map[string][]string{"r": {"s"}}); err != nil || res[0].Status != Written {
		t.Fatalf("write: %v %v", res, err)
	}
	for _, tc := range []struct {
		name  string
		value func(v []byte) []byte
		want  error  // errors.Is
		msg   string // or the error says this
	}{
		{"current", func(v []byte) []byte { return v }, nil, ""},
		{"version 1 head", func(v []byte) []byte {
			binary.LittleEndian.PutUint16(v[sha256.Size+len("WMRLCHD\x00"):], 1)
			return v
		}, correction.ErrUnsupportedVersion, ""},
		{"other digest", func(v []byte) []byte { v[0] ^= 1; return v }, nil, "does not match its digest"},
		{"full encoding", func([]byte) []byte { return st.Encode() }, correction.ErrBadMagic, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr.Set(s.StateKey("r", "s", 30), string(tc.value(RedisValue(w.Snap))))
			b, err := s.ReadState(ctx, "r", "s", 30)
			switch {
			case tc.want != nil:
				if !errors.Is(err, tc.want) {
					t.Fatalf("read: %v, want %v", err, tc.want)
				}
			case tc.msg != "":
				if err == nil || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("read: %v, want %q", err, tc.msg)
				}
			case err != nil || !bytes.Equal(b, st.Encode()):
				t.Fatalf("read: %v, or the state read back differs", err)
			}
			// A listing still lists the run: the refused value is counted alone and said to be unreadable.
			sums, err := s.Summaries(ctx, []string{"r"})
			if err != nil || len(sums) != 1 || len(sums[0].Streams) != 1 {
				t.Fatalf("summaries: %+v, %v", sums, err)
			}
			if ss := sums[0].Streams[0]; (ss.Unreadable != nil) != (tc.want != nil) || ss.StateBytes == 0 {
				t.Fatalf("summary of the %s value: unreadable %v, %d bytes", tc.name, ss.Unreadable, ss.StateBytes)
			}
		})
	}
}

// ListRuns finds every run with a streams set under the prefix, and only those: not another
// prefix's runs, not per-stream keys.
func TestStoreRuns(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	states := sealedStates(t, 1)
	for _, tc := range []struct {
		prefix string
		runs   []string
	}{{"p", []string{"a", "b"}}, {"p2", []string{"c"}}} {
		s := New(rdb, tc.prefix, 3)
		for _, run := range tc.runs {
			w := storeWrite(states[0], nil, true)
			sn := *w.Snap
			sn.RunID = run
			w.Snap = &sn
			if _, err := s.Write(ctx, []Write{w}, map[string][]string{run: {"s"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for prefix, want := range map[string][]string{"p": {"a", "b"}, "p2": {"c"}, "none": nil} {
		got, err := New(rdb, prefix, 3).ListRuns(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("prefix %s: runs %v (%v), want %v", prefix, got, err, want)
		}
	}
}

// TestStoreHeadHash: the head hash holds the fields doc.go names; a snapshot without breakpoints
// keeps the latest fit and its step, and ReadHead reads them back.
func TestStoreHeadHash(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := New(rdb, "p", 3)
	ctx := context.Background()
	states := sealedStates(t, 2)
	w0 := storeWrite(states[0], nil, true)
	w0.Snap.ConfigHash, w0.Snap.AnchorWeight = "c0ffee", 0.25
	w0.Snap.BreakX, w0.Snap.BreakY = []float64{0, 1}, []float64{0.1, 0.9}
	w1 := storeWrite(states[1], states[0], false)
	w1.Snap.ConfigHash, w1.Snap.AnchorWeight = "c0ffee", 0.5
	for _, w := range []Write{w0, w1} {
		if res, err := s.Write(ctx, []Write{w}, map[string][]string{"r": {"s"}}); err != nil || res[0].Status != Written {
			t.Fatalf("write step %d: %v %v", w.Snap.Step, res, err)
		}
	}
	want := map[string]string{"sealed_step": "1", "digest": w1.Snap.Digest, "config_hash": "c0ffee",
		"fit_version": strconv.FormatUint(w1.Snap.FitVersion, 10), "anchor_weight": "0.5",
		"pairs": strconv.Itoa(w1.Snap.Pairs), "fit": `{"x":[0,1],"y":[0.1,0.9]}`, "fit_step": "0"}
	if got, err := rdb.HGetAll(ctx, s.HeadKey("r", "s")).Result(); err != nil || !maps.Equal(got, want) {
		t.Fatalf("head hash %v %v, want %v", got, err, want)
	}
	h, err := s.ReadHead(ctx, "r", "s")
	if err != nil || h.SealedStep != 1 || h.AnchorWeight != 0.5 || h.FitStep != 0 || !slices.Equal(h.FitY, []float64{0.1, 0.9}) {
		t.Fatalf("head %+v %v", h, err)
	}
}
