package correction

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden state digests and fuzz seed corpora")

// goldenStates are deterministic states whose encodings are pinned: any
// change to the encoding or to the math changes their digests.
func goldenStates(t testing.TB) map[string]*State {
	t.Helper()
	small := func(cfg Config) Config { cfg.Window, cfg.MinPairs = 120, 40; return cfg }
	out := map[string]*State{
		"empty_default": mustNew(t, DefaultConfig()).NewState("run-0", "main"),
	}
	for name, cfg := range map[string]Config{
		"default_30":         DefaultConfig(),
		"reference_30":       ReferenceConfig(),
		"default_small_30":   small(DefaultConfig()),
		"reference_small_30": small(ReferenceConfig()),
	} {
		_, st := run(t, mustNew(t, cfg), simulate("run-0", "main", 30, 2026))
		out[name] = st
	}
	return out
}

func TestStateRoundTrip(t *testing.T) {
	for name, st := range goldenStates(t) {
		t.Run(name, func(t *testing.T) {
			enc := st.Encode()
			dec, err := DecodeState(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dec.Encode(), enc) || dec.Digest() != st.Digest() {
				t.Fatal("Encode(Decode(b)) != b")
			}
			// A decoded state continues exactly like the original (replay).
			c := mustNew(t, st.Config())
			more := simulate("run-0", "main", 40, 7)[30:]
			a, b := st, dec
			for i, s := range more {
				s.Step = a.SealedStep() + 1
				ra, na, err := c.Correct(a, s)
				if err != nil {
					t.Fatal(err)
				}
				rb, nb, err := c.Correct(b, s)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(ra) != fmt.Sprint(rb) || na.Digest() != nb.Digest() {
					t.Fatalf("decoded state diverges %d steps after decode", i+1)
				}
				a, b = na, nb
			}
		})
	}
}

// TestStateDigestsGolden pins the state encoding (state_digests.json holds the SHA-256 of Encode's
// bytes) and the digest (state_digests_chunked.json): neither may change without a new version.
func TestStateDigestsGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		sum  func(*State) [32]byte
	}{
		{"state_digests.json", func(st *State) [32]byte { return sha256.Sum256(st.Encode()) }},
		{"state_digests_chunked.json", (*State).Digest},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			got := map[string]string{}
			for name, st := range goldenStates(t) {
				d := tc.sum(st)
				got[name] = hex.EncodeToString(d[:])
			}
			if *update {
				b, _ := json.MarshalIndent(got, "", "  ")
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]string
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			if len(want) != len(got) {
				t.Fatalf("golden has %d states, test builds %d", len(want), len(got))
			}
			for name, d := range got {
				if want[name] != d {
					t.Errorf("%s: digest %s, golden %s (encoding or math changed; bump StateEncodingVersion or the digest version, or run -update if intended)", name, d, want[name])
				}
			}
		})
	}
}

func TestDecodeStateErrors(t *testing.T) {
	st := goldenStates(t)["default_small_30"]
	enc := st.Encode()
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(enc)) }
	ringOff := len(stateMagic) + 2 + configEncodedLen + 32 + 4 + len("run-0") + 4 + len("main") + 24
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short magic prefix", []byte("WMR"), ErrTruncated},
		{"bad magic", []byte("NOTASTATE"), ErrBadMagic},
		{"version", mut(func(b []byte) []byte { b[8] = byte(StateEncodingVersion + 1); return b }), ErrUnsupportedVersion},
		{"version 0", mut(func(b []byte) []byte { b[8] = 0; return b }), ErrUnsupportedVersion},
		{"truncated", enc[:len(enc)-1], ErrTruncated},
		{"truncated mid window", enc[:ringOff+20], ErrTruncated},
		{"trailing", append(bytes.Clone(enc), 0), ErrCorruptState},
		{"config hash", mut(func(b []byte) []byte { b[len(stateMagic)+2+configEncodedLen] ^= 1; return b }), ErrCorruptState},
		{"invalid config", mut(func(b []byte) []byte { b[len(stateMagic)+2] = 9; return b }), ErrCorruptState},
		{"frozen byte", mut(func(b []byte) []byte { b[len(b)-1] = 2; return b }), ErrCorruptState},
		{"huge window count", mut(func(b []byte) []byte {
			copy(b[ringOff:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
			return b
		}), ErrTruncated},
		{"nan pair", mut(func(b []byte) []byte {
			copy(b[ringOff+8:], []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
			return b
		}), ErrCorruptState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeState(tt.b)
			if !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("DecodeState = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestWriteFuzzSeeds keeps the committed seed corpora in testdata/fuzz in
// sync with the encoder; it writes them only with -update.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite fuzz seed corpora")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeState")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"empty_default", "default_small_30", "reference_small_30"} {
		enc := goldenStates(t)[name].Encode()
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", enc)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// FuzzFitIsotonic seeds: the small golden cases as (x, y, w) triples.
	dir = filepath.Join("testdata", "fuzz", "FuzzFitIsotonic")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range loadGolden(t) {
		if c.Gen != nil && c.Gen.N > 20 {
			continue
		}
		x, y, w := c.X, c.Y, c.W
		if c.Gen != nil {
			var err error
			if x, y, w, err = genCase(c.Gen.Kind, c.Gen.N, c.Gen.Seed); err != nil {
				t.Fatal(err)
			}
		}
		var b []byte
		for i := range x {
			wi := 1.0
			if w != nil {
				wi = w[i]
			}
			for _, v := range []float64{x[i], y[i], wi} {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, "golden_"+c.Name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
