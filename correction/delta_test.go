package correction

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
)

// chunkStore is a compacted changelog of chunk slots: the latest write of each slot wins.
type chunkStore struct {
	slots map[int]storedChunk
}

type storedChunk struct {
	chunk, first uint64
	pairs        []byte
}

// write stores the chunks that the pairs added since prevTotal fell into (all window chunks if
// full) and returns the bytes written.
func (cs *chunkStore) write(st *State, prevTotal uint64, full bool) int {
	first, n := st.WindowSpan()
	end := first + uint64(n)
	from := prevTotal
	if full {
		from = first
	}
	if from >= end {
		return 0
	}
	k := uint64(ChunkSlots(st.Config().Window))
	written := 0
	for c := from / ChunkPairs; c <= (end-1)/ChunkPairs; c++ {
		lo := max(c*ChunkPairs, first)
		b := st.AppendWindow(nil, lo, (c+1)*ChunkPairs)
		cs.slots[int(c%k)] = storedChunk{chunk: c, first: lo, pairs: b}
		written += len(b)
	}
	return written
}

func (cs *chunkStore) window(t *testing.T, head []byte) []byte {
	t.Helper()
	first, n, w, err := HeadWindow(head)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	end := first + uint64(n)
	k := uint64(ChunkSlots(w))
	for c := first / ChunkPairs; n > 0 && c <= (end-1)/ChunkPairs; c++ {
		sc, ok := cs.slots[int(c%k)]
		if !ok || sc.chunk != c {
			t.Fatalf("slot %d holds chunk %d, want %d", c%k, sc.chunk, c)
		}
		lo, hi := max(first, sc.first), min(end, (c+1)*ChunkPairs)
		out = append(out, sc.pairs[16*(lo-sc.first):16*(hi-sc.first)]...)
	}
	return out
}

func TestHeadAndChunksReassemble(t *testing.T) {
	small := func(cfg Config) Config { cfg.Window, cfg.MinPairs = 300, 40; return cfg }
	centred := small(DefaultConfig())
	centred.Map = MapCentred
	every := small(DefaultConfig())
	every.RefitEvery = 50
	noDebias := small(DefaultConfig())
	noDebias.Debias = false
	for name, cfg := range map[string]Config{
		"default": small(DefaultConfig()), "reference": small(ReferenceConfig()), "centred": centred,
		"zspace":                 small(ZSpaceConfig()),
		"default_refit_every_50": every, "no_debias": noDebias, "default_5000": DefaultConfig(),
	} {
		t.Run(name, func(t *testing.T) {
			c := mustNew(t, cfg)
			st := c.NewState("run-0", "main")
			cs := &chunkStore{slots: map[int]storedChunk{}}
			omitted, included := 0, 0
			for i, s := range simulate("run-0", "main", 120, 11) {
				prev := st.TotalPairs()
				_, next, err := c.Correct(st, s)
				if err != nil {
					t.Fatal(err)
				}
				st = next
				if got := cs.write(st, prev, i == 0); got > 16*2*ChunkPairs {
					t.Fatalf("step %d wrote %d chunk bytes", i, got)
				}
				head := st.EncodeHead()
				if flags, _, _, _ := headParts(head); flags == 0 {
					omitted++
				} else {
					included++
				}
				back, err := AssembleState(head, cs.window(t, head))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if !bytes.Equal(back.Encode(), st.Encode()) {
					t.Fatalf("step %d: reassembled state differs", i)
				}
				// The digest Correct carried forward chunk by chunk is the one a state
				// hashing its whole window computes, and the definition's.
				if d := st.Digest(); d != back.Digest() || d != chunkedDigestSpec(t, st.Encode(), len(st.appendPrefix(nil))) {
					t.Fatalf("step %d: incremental digest differs from the whole-window one", i)
				}
				// The reassembled state carries on exactly like the original.
				if i == 60 {
					more := simulate("run-0", "main", 1, 99)[0]
					more.Step = st.SealedStep() + 1
					_, a, errA := c.Correct(st, more)
					_, b, errB := c.Correct(back, more)
					if errA != nil || errB != nil || a.Digest() != b.Digest() {
						t.Fatal("reassembled state advances differently")
					}
					// A second branch from st must not see the first branch's chunk hashes.
					other := simulate("run-0", "main", 1, 7)[0]
					other.Step = more.Step
					_, o, err := c.Correct(st, other)
					if err != nil {
						t.Fatal(err)
					}
					if o.Digest() != chunkedDigestSpec(t, o.Encode(), len(o.appendPrefix(nil))) || o.Digest() == a.Digest() {
						t.Fatal("branching from one state mixed up chunk hashes")
					}
				}
			}
			if st.Pairs() < st.Config().Window && st.Config().Window <= 300 {
				t.Fatalf("window never filled: %d pairs", st.Pairs())
			}
			t.Logf("heads without breakpoints %d, with %d, head bytes %d", omitted, included, len(st.EncodeHead()))
			if cfg.Debias && cfg.RefitEvery == 0 && cfg.Mode == ModeDefault && omitted == 0 {
				t.Fatal("a refit-every-step state never left its breakpoints out")
			}
		})
	}
}

func TestAssembleStateErrors(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	_, st := run(t, c, simulate("run-0", "main", 10, 3))
	head := st.EncodeHead()
	win := st.AppendWindow(nil, 0, st.TotalPairs())
	if _, err := AssembleState(head, win); err != nil {
		t.Fatal(err)
	}
	bad := func(f func([]byte) []byte) []byte { return f(bytes.Clone(head)) }
	for _, tc := range []struct {
		name       string
		head, win  []byte
		want       error
		wantDigest bool
	}{
		{"full encoding is not a head", st.Encode(), win, ErrBadMagic, false},
		{"short window", head, win[:len(win)-16], ErrCorruptState, false},
		{"truncated head", head[:12], win, ErrTruncated, false},
		{"future version", bad(func(b []byte) []byte { b[8] = 9; return b }), win, ErrUnsupportedVersion, false},
		{"bad flags", bad(func(b []byte) []byte { b[10] = 7; return b }), win, ErrCorruptState, false},
		{"changed pair", head, append(bytes.Clone(win[:len(win)-8]), 0, 0, 0, 0, 0, 0, 0xf0, 0x3f), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AssembleState(tc.head, tc.win)
			if tc.wantDigest {
				if err == nil && got.Digest() == st.Digest() {
					t.Fatal("a changed window pair kept the digest")
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// chunkedDigestSpec computes Digest from an encoding whose window pairs start at byte
// split, straight from its definition: SHA-256 of the tag, the bytes before the window, the
// SHA-256 of each ChunkPairs-aligned run of window pairs (by absolute index), the bytes after.
func chunkedDigestSpec(t *testing.T, enc []byte, split int) [32]byte {
	t.Helper()
	st, err := DecodeState(enc)
	if err != nil {
		t.Fatal(err)
	}
	first, n := st.WindowSpan()
	h := sha256.New()
	h.Write([]byte("WMRLCDG\x02"))
	h.Write(enc[:split])
	win := enc[split : split+16*n]
	for i := 0; i < n; {
		j := i + 1
		for j < n && (first+uint64(j))%ChunkPairs != 0 {
			j++
		}
		sum := sha256.Sum256(win[16*i : 16*j])
		h.Write(sum[:])
		i = j
	}
	h.Write(enc[split+16*n:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// TestHeadVersion: a head of the one version EncodeHead writes assembles; any other version, and a
// full encoding, is refused.
func TestHeadVersion(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	_, st := run(t, c, simulate("run-0", "main", 10, 3))
	head := st.EncodeHead()
	win := st.AppendWindow(nil, 0, st.TotalPairs())
	version := func(v uint16) []byte {
		b := bytes.Clone(head)
		binary.LittleEndian.PutUint16(b[len(headMagic):], v)
		return b
	}
	for _, tc := range []struct {
		name string
		head []byte
		err  error
	}{
		{"current", head, nil},
		{"version 1", version(1), ErrUnsupportedVersion},
		{"version 0", version(0), ErrUnsupportedVersion},
		{"version 3", version(3), ErrUnsupportedVersion},
		{"full encoding", st.Encode(), ErrBadMagic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			back, err := AssembleState(tc.head, win)
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if err == nil && !bytes.Equal(back.Encode(), st.Encode()) {
				t.Fatal("assembled state differs")
			}
		})
	}
}
