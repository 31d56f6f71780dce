package topics

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzJSON checks the decoder contract on arbitrary bytes: no panic, every error classified by
// Reason, and a decoded value re-encodes to bytes that decode to the same value and the same
// bytes again.
func fuzzJSON[T any](t *testing.T, b []byte, dec func([]byte) (T, error), enc func(T) ([]byte, error), created func(*T) *time.Time) {
	v, err := dec(b)
	if err != nil {
		if Reason(err) == "error" {
			t.Fatalf("unclassified error: %v", err)
		}
		return
	}
	b1, err := enc(v)
	if err != nil {
		t.Fatalf("decoded value does not encode: %v\ninput %q", err, b)
	}
	v2, err := dec(b1)
	if err != nil {
		t.Fatalf("re-encoded value does not decode: %v\n%s", err, b1)
	}
	b2, err := enc(v2)
	if err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("encoding not stable: %v\n%s\n%s", err, b1, b2)
	}
	t1, t2 := created(&v), created(&v2)
	if !t1.Equal(*t2) {
		t.Fatalf("created_at changed: %v → %v", *t1, *t2)
	}
	*t1, *t2 = time.Time{}, time.Time{}
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("round trip changed the value:\n%#v\n%#v", v, v2)
	}
}

func FuzzDecodeRollout(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodeRollout, EncodeRollout, func(r *Rollout) *time.Time { return &r.CreatedAt })
	})
}

func FuzzDecodeStep(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodeStep, EncodeStep, func(m *StepManifest) *time.Time { return &m.CreatedAt })
	})
}

func FuzzDecodePredicted(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodePredicted, EncodePredicted, func(p *PredictedReward) *time.Time { return &p.CreatedAt })
	})
}

func FuzzDecodeExecuted(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodeExecuted, EncodeExecuted, func(e *ExecutedReward) *time.Time { return &e.CreatedAt })
	})
}

func FuzzDecodeCalibration(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodeCalibration, EncodeCalibration, func(s *CalibrationSnapshot) *time.Time { return &s.CreatedAt })
	})
}

func FuzzDecodeCalibrationEnd(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzJSON(t, b, DecodeCalibrationEnd, EncodeCalibrationEnd, func(e *CalibrationEnd) *time.Time { return &e.EndedAt })
	})
}

func FuzzDecodeAdvantages(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := DecodeAdvantages(b)
		if err != nil {
			if Reason(err) == "error" {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		b1, err := EncodeAdvantages(rows)
		if err != nil {
			t.Fatalf("decoded rows do not encode: %v", err)
		}
		rows2, err := DecodeAdvantages(b1)
		if err != nil {
			t.Fatalf("re-encoded rows do not decode: %v", err)
		}
		if len(rows) != len(rows2) || (len(rows) > 0 && !reflect.DeepEqual(rows, rows2)) {
			t.Fatalf("round trip changed the rows:\n%+v\n%+v", rows, rows2)
		}
		if b2, _ := EncodeAdvantages(rows2); !bytes.Equal(b1, b2) {
			t.Fatal("encoding not stable")
		}
	})
}

func FuzzParseChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		i, n, err := ParseChunk(s)
		if err != nil {
			return
		}
		if i < 0 || i >= n {
			t.Fatalf("ParseChunk(%q) = %d, %d", s, i, n)
		}
		if got := FormatChunk(i, n); got != s {
			t.Fatalf("FormatChunk(ParseChunk(%q)) = %q", s, got)
		}
	})
}

// fuzzSeeds collects the golden records and the JSON decoders' fuzz corpora (which hold many
// invalid records).
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	more, _ := filepath.Glob(filepath.Join("testdata", "golden", "invalid", "*.json"))
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	corpus, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode*", "*"))
	for _, f := range corpus {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Corpus files are "go test fuzz v1\n[]byte(<Go string literal>)\n".
		_, lit, _ := strings.Cut(string(b), "\n[]byte(")
		if s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(lit), ")")); err == nil {
			seeds = append(seeds, []byte(s))
		}
	}
	return seeds
}

// FuzzDecodeCalibrationChunk: arbitrary keys and values never panic, and a decoded chunk
// re-encodes to its value under its key.
func FuzzDecodeCalibrationChunk(f *testing.F) {
	c := CalibrationChunk{RunID: "r1", Stream: "mle", Slot: 2, Step: 7, Chunk: 5, First: 5*64 + 3, Pairs: make([]byte, 32)}
	f.Add(CalibrationChunkKey(c.RunID, c.Stream, c.Slot), EncodeCalibrationChunk(c))
	f.Add([]byte("r1/mle/x"), []byte(chunkMagic))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		got, err := DecodeCalibrationChunk(key, value, 64)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeCalibrationChunk(got), value) || !bytes.Equal(CalibrationChunkKey(got.RunID, got.Stream, got.Slot), key) {
			t.Fatalf("chunk %+v does not re-encode to its key %q and value %q", got, key, value)
		}
	})
}
