package trainer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/wmrl/wmrl/sinks/steps/stepstest"
	"github.com/wmrl/wmrl/topics"
)

var update = flag.Bool("update", false, "rewrite golden files")

// readFrames is the test's own reader of the frame format, so this package's tests do not depend
// on the correction consumer; production code uses topics.ReadReplay.
func readFrames(r io.Reader) ([][]byte, error) {
	var out [][]byte
	for {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		p := make([]byte, binary.BigEndian.Uint32(n[:]))
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
}

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

// TestReplayFileGolden digests the payloads of a checked-in replay file (the format of
// consumers/correct's ReplayWriter; `wmrl digest --file` reads it with ReadReplay, see
// cmd/wmrl's test); the digest must equal DigestRows of the rows it was made from.
func TestReplayFileGolden(t *testing.T) {
	var rows []topics.AdvantageRow
	var payloads [][]byte
	for step := int64(0); step < 3; step++ {
		r := stepstest.StepRows("a", step, 4, 8)
		rows = append(rows, r...)
		ps, err := topics.ChunkAdvantages(r, smallChunk)
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, ps...)
	}
	other, _ := topics.ChunkAdvantages(stepstest.StepRows("b", 0, 1, 4), smallChunk)
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
	got, err := readFrames(f)
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
	changed = append(changed, stepstest.Mutate(t, stepstest.ChunkRecords(t, names, stepstest.StepRows("a", 0, 4, 8), smallChunk)[0]).Value)
	if _, err := DigestPayloads(changed, "a"); !errors.Is(err, topics.ErrConflict) {
		t.Fatalf("a changed copy of a row: err = %v, want ErrConflict", err)
	}
}
