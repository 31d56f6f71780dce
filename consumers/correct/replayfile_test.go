package correct

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
	if err := WriteReplayFile(path, payloads); err != nil {
		t.Fatal(err)
	}
	rows, err := ReadReplayFile(path)
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

func TestReadReplayRejectsMalformed(t *testing.T) {
	good, err := topics.EncodeAdvantages(nil)
	if err != nil {
		t.Fatal(err)
	}
	frame := func(p []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...) }
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"empty file", nil, true},
		{"one empty batch", frame(good), true},
		{"truncated length", []byte{0, 0}, false},
		{"zero length", []byte{0, 0, 0, 0}, false},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, false},
		{"truncated payload", frame(good)[:10], false},
		{"not arrow", frame([]byte("hello")), false},
	} {
		_, err := ReadReplayRows(bytes.NewReader(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrReplayFile) {
			t.Errorf("%s: %v does not wrap ErrReplayFile", tc.name, err)
		}
	}
}

func FuzzReadReplay(f *testing.F) {
	good, _ := topics.EncodeAdvantages(nil)
	f.Add(append(binary.BigEndian.AppendUint32(nil, uint32(len(good))), good...))
	f.Add([]byte{0, 0, 0, 1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := ReadReplayRows(bytes.NewReader(b))
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a valid file of the same rows.
		var buf bytes.Buffer
		w := NewReplayWriter(&buf)
		if err := w.WriteRows(rows, topics.MaxAdvantageBytes); err != nil {
			t.Fatalf("rows that decoded do not re-encode: %v", err)
		}
		_ = w.Flush()
		back, err := ReadReplayRows(&buf)
		if err != nil || topics.DigestRows(back) != topics.DigestRows(rows) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func smallCorr() correctionConfig {
	c := defaultCorr()
	c.MinPairs = 4
	return c
}

func ExampleWriteReplayFile() {
	dir, _ := os.MkdirTemp("", "replay")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "run.arrows")
	rows := []topics.AdvantageRow{{RunID: "r", Stream: "s", Step: 0, GroupID: "g", RolloutID: "a",
		Source: topics.SourceWorldModel, Predicted: 0.5, PredictedOK: true, Calibrated: 0.5, Used: 0.5, Weight: 1}}
	payload, _ := topics.EncodeAdvantages(rows)
	_ = WriteReplayFile(path, [][]byte{payload})
	back, _ := ReadReplayFile(path)
	fmt.Println(len(back), back[0].RolloutID, topics.DigestRows(back) == topics.DigestRows(rows))
	// Output: 1 a true
}

func ExamplePartitionFor() {
	// The partition of a run among 3 partitions, as franz-go's and Java's default partitioners
	// place a record keyed by the run id.
	fmt.Println(PartitionFor("run-0", 3) >= 0)
	// Output: true
}
