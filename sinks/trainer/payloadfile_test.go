package trainer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/wmrl/wmrl/topics"
)

var update = flag.Bool("update", false, "rewrite golden files")

func writePayloads(ps [][]byte) []byte {
	var b bytes.Buffer
	for _, p := range ps {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		b.Write(n[:])
		b.Write(p)
	}
	return b.Bytes()
}

func TestReadPayloadFile(t *testing.T) {
	a, b := []byte("first"), []byte{}
	good := writePayloads([][]byte{a, b, a})
	huge := binary.BigEndian.AppendUint32(nil, topics.MaxAdvantageBytes+1)
	tests := []struct {
		name string
		in   []byte
		want [][]byte
		err  error
	}{
		{"empty", nil, nil, nil},
		{"three entries", good, [][]byte{a, b, a}, nil},
		{"truncated length", good[:len(good)-len(a)-2], nil, topics.ErrMalformed},
		{"truncated payload", good[:len(good)-1], nil, topics.ErrMalformed},
		{"too large", huge, nil, topics.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadPayloadFile(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReplayFileGolden digests a checked-in replay file; its digest must equal DigestRows of the
// rows it was made from, which pins the file format and the digest together.
func TestReplayFileGolden(t *testing.T) {
	var rows []topics.AdvantageRow
	var payloads [][]byte
	for step := int64(0); step < 3; step++ {
		r := stepRows("a", step, 4, 8)
		rows = append(rows, r...)
		ps, err := topics.ChunkAdvantages(r, smallChunk)
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, ps...)
	}
	other, _ := topics.ChunkAdvantages(stepRows("b", 0, 1, 4), smallChunk)
	payloads = append(payloads, other...)
	payloads = append(payloads, payloads[0]) // a replayed chunk
	path := filepath.Join("testdata", "replay.bin")
	if *update {
		if err := os.WriteFile(path, writePayloads(payloads), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ReadPayloadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := DigestPayloads(got, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := topics.DigestRows(rows); res.Digest != want || res.Rows != len(rows) || res.Steps != 3 || res.Duplicates == 0 {
		t.Fatalf("%+v, want digest %s over %d rows in 3 steps with duplicates", res, want, len(rows))
	}
	changed := append([][]byte(nil), got...)
	changed = append(changed, mutate(t, chunkRecords(t, names, stepRows("a", 0, 4, 8), smallChunk)[0]).Value)
	if _, err := DigestPayloads(changed, "a"); !errors.Is(err, topics.ErrConflict) {
		t.Fatalf("a changed copy of a row: err = %v, want ErrConflict", err)
	}
}

func FuzzReadPayloadFile(f *testing.F) {
	f.Add([]byte{})
	f.Add(writePayloads([][]byte{[]byte("x"), {}}))
	f.Add([]byte{0, 0, 0, 9, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		ps, err := ReadPayloadFile(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, topics.ErrMalformed) && !errors.Is(err, topics.ErrTooLarge) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if !bytes.Equal(writePayloads(ps), in) {
			t.Fatal("entries do not re-encode to the input")
		}
	})
}
