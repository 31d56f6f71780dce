package topics

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// pythonManifest is testdata/golden/python/manifest.json, written by the Python client's
// python/tests/golden_python.py together with the records it describes.
type pythonManifest struct {
	Valid   map[string]string `json:"valid"`
	Invalid map[string]struct {
		Schema string `json:"schema"`
		Reason string `json:"reason"`
	} `json:"invalid"`
	AdvantagesDigest string `json:"advantages_digest"`
	AdvantagesRows   int    `json:"advantages_rows"`
}

func readPython(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "python", name))
	if err != nil {
		t.Fatalf("%v (regenerate with `python python/tests/golden_python.py --write` in the client's venv)", err)
	}
	return b
}

// encodeAny re-encodes a value decodeAny returned, with the Go encoder of its type.
func encodeAny(t *testing.T, v any) []byte {
	t.Helper()
	var b []byte
	var err error
	switch x := v.(type) {
	case Rollout:
		b, err = EncodeRollout(x)
	case StepManifest:
		b, err = EncodeStep(x)
	case PredictedReward:
		b, err = EncodePredicted(x)
	case ExecutedReward:
		b, err = EncodeExecuted(x)
	case CalibrationSnapshot:
		b, err = EncodeCalibration(x)
	default:
		t.Fatalf("no encoder for %T", v)
	}
	if err != nil {
		t.Fatalf("re-encode %T: %v", v, err)
	}
	return b
}

// TestPythonContract is the reverse direction of the golden files: what the Python client wrote
// must pass the strict Go decoders, re-encode to the same bytes, fail where Python's decoder
// fails with the same reason, and digest to the same value. It also records, in
// python/go_digests.json, the digests Go computes for the Python tests to compare with.
func TestPythonContract(t *testing.T) {
	var m pythonManifest
	if err := json.Unmarshal(readPython(t, "manifest.json"), &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m.Valid) == 0 || len(m.Invalid) == 0 {
		t.Fatalf("manifest.json lists %d valid and %d invalid files; want some of each", len(m.Valid), len(m.Invalid))
	}

	for _, name := range sortedNames(m.Valid) {
		t.Run("valid/"+name, func(t *testing.T) {
			b := readPython(t, name)
			v, err := decodeAny(m.Valid[name], b)
			if err != nil {
				t.Fatalf("Go refuses what Python wrote: %s: %v", Reason(err), err)
			}
			got := encodeAny(t, v)
			if _, binary := v.(CalibrationSnapshot); !binary {
				got = append(got, '\n')
			}
			if !bytes.Equal(got, b) {
				t.Errorf("Go re-encodes differently:\n  go %s\n  py %s", got, b)
			}
		})
	}

	for name, want := range m.Invalid {
		t.Run("invalid/"+name, func(t *testing.T) {
			_, err := decodeAny(want.Schema, readPython(t, filepath.Join("invalid", name)))
			if got := Reason(err); got != want.Reason {
				t.Errorf("Go says %q, Python says %q (%v)", got, want.Reason, err)
			}
		})
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "golden", "python", "invalid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := m.Invalid[e.Name()]; !ok {
			t.Errorf("stale file python/invalid/%s is not in manifest.json", e.Name())
		}
	}

	rows, err := DecodeAdvantages(readPython(t, "advantages.arrows"))
	if err != nil {
		t.Fatalf("Go refuses the pyarrow stream: %s: %v", Reason(err), err)
	}
	var want []AdvantageRow
	dec := json.NewDecoder(bytes.NewReader(readPython(t, "advantages.json")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("advantages.json: %v", err)
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("advantages.arrows decodes to\n%+v\nwant (advantages.json)\n%+v", rows, want)
	}
	if got := DigestRows(rows); got != m.AdvantagesDigest || len(rows) != m.AdvantagesRows {
		t.Errorf("Go digest %s of %d rows, Python digest %s of %d rows", got, len(rows), m.AdvantagesDigest, m.AdvantagesRows)
	}

	var golden []AdvantageRow
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "advantages.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	var goldenV2 []AdvantageRow
	if b, err = os.ReadFile(filepath.Join("testdata", "golden", "advantages_v2.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &goldenV2); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, filepath.Join("python", "go_digests.json"), mustJSON(t, map[string]any{
		"golden_advantages":      DigestRows(golden),
		"golden_advantages_rows": len(golden),
		"golden_advantages_v2":   DigestRows(goldenV2),
		"python_advantages":      DigestRows(rows),
	}))
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
