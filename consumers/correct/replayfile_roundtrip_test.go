package correct

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/wmrl/wmrl/topics"
)

func TestReplayFileRoundTrip(t *testing.T) {
	f := newFeeder(testEngine(t, smallCorr()))
	f.add(flatten(synth(t, smallWorkload))...)
	sealed := f.seal(t)
	path := filepath.Join(t.TempDir(), "replay.arrows")
	var payloads [][]byte
	for _, s := range sealed {
		cs, err := topics.ChunkAdvantages(s.rows, 4096)
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, cs...)
	}
	if err := topics.WriteReplayFile(path, payloads); err != nil {
		t.Fatal(err)
	}
	rows, err := topics.ReadReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if topics.DigestRows(rows) != topics.DigestRows(rowsOf(sealed)) || len(rows) != len(rowsOf(sealed)) {
		t.Fatal("rows changed through the replay file")
	}
	// The frames are exactly the payloads: length prefix, then the bytes.
	b, _ := os.ReadFile(path)
	if n := binary.BigEndian.Uint32(b); int(n) != len(payloads[0]) || !bytes.Equal(b[4:4+n], payloads[0]) {
		t.Fatal("first frame is not the first payload")
	}
}

func smallCorr() correctionConfig {
	c := defaultCorr()
	c.MinPairs = 4
	return c
}
