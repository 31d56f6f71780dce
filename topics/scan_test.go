package topics

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/topics/internal/jsonscan"
)

// diffDecode decodes b as T with decodeJSON (fast path, slow fallback) and with the oracle
// decodeJSONSlow and fails unless both give the same value and the same error, Reason and
// sentinel; a record the fast path accepts must also be one the slow path accepts, with the same
// value. It reports whether the fast path accepted b.
func diffDecode[T any](t *testing.T, b []byte, kind, want string) bool {
	t.Helper()
	var got, oracle, fast T
	err := decodeJSON(b, kind, want, &got)
	oerr := decodeJSONSlow(b, kind, want, &oracle)
	switch {
	case (err == nil) != (oerr == nil):
		t.Fatalf("%s %q: error %v, oracle %v", kind, b, err, oerr)
	case err != nil && err.Error() != oerr.Error():
		t.Fatalf("%s %q: error %q, oracle %q", kind, b, err, oerr)
	case Reason(err) != Reason(oerr):
		t.Fatalf("%s %q: Reason %q, oracle %q", kind, b, Reason(err), Reason(oerr))
	case !reflect.DeepEqual(got, oracle):
		t.Fatalf("%s %q: value\n%#v\noracle\n%#v", kind, b, got, oracle)
	}
	for _, s := range []error{ErrMalformed, ErrUnknownSchema, ErrInvalid, ErrTooLarge} {
		if errors.Is(err, s) != errors.Is(oerr, s) {
			t.Fatalf("%s %q: errors.Is(%v) differs from the oracle's %v", kind, b, s, oerr)
		}
	}
	if len(b) > MaxRecordBytes || !jsonscan.Decode(b, want, &fast) {
		if !reflect.DeepEqual(fast, *new(T)) {
			t.Fatalf("%s %q: rejected by the fast path but not reset: %#v", kind, b, fast)
		}
		return false
	}
	if oerr != nil {
		t.Fatalf("%s %q: fast path accepts what the oracle rejects: %v", kind, b, oerr)
	}
	if !reflect.DeepEqual(fast, oracle) {
		t.Fatalf("%s %q: fast value\n%#v\noracle\n%#v", kind, b, fast, oracle)
	}
	return true
}

// diffAll runs diffDecode for every JSON record type and reports how many took the fast path.
func diffAll(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for _, ok := range []bool{
		diffDecode[Rollout](t, b, "rollout", SchemaRollout),
		diffDecode[StepManifest](t, b, "step", SchemaStep),
		diffDecode[PredictedReward](t, b, "predicted", SchemaPredicted),
		diffDecode[ExecutedReward](t, b, "executed", SchemaExecuted),
		diffDecode[CalibrationSnapshot](t, b, "calibration", SchemaCalibration),
	} {
		if ok {
			n++
		}
	}
	return n
}

// fastVariants are valid records in forms the encoder does not write (escapes, whitespace, field
// order, explicit nulls, non-ASCII) that the fast path must still take.
func fastVariants(t *testing.T) []string {
	pr, _ := EncodePredicted(samplePredicted())
	ro, _ := EncodeRollout(sampleRollout())
	st, _ := EncodeStep(sampleStep())
	ca, _ := encodeCalibrationV1(sampleCalibration())
	im, _ := EncodeExecuted(sampleImputed())
	rep := func(b []byte, old, new string) string {
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(string(b), old, new, 1)
	}
	return []string{
		string(pr), string(ro), string(st), string(ca), string(im),
		" \r\n\t" + strings.ReplaceAll(strings.ReplaceAll(string(pr), ",", " ,\n "), `":`, "\"\t: ") + "\n",
		rep(pr, `"model":"wm-proxy"`, `"model":"wm\u002dpr\u00f6xy \ud83d\ude00 \"q\""`),
		rep(pr, `"model":"wm-proxy"`, `"model":"wm-pröxy ✓"`),
		rep(pr, `"step":3,`, ``) + " ",
		rep(pr, `"created_at":"2026-03-01T12:00:00Z"`, `"created_at":"2026-03-01T14:00:00.5+02:00"`),
		strings.TrimSuffix(rep(pr, `"schema":"wmrl.reward.predicted.v1",`, ``), "}") + `,"schema":"wmrl.reward.predicted.v1"}`,
		rep(pr, `"score":0.625`, `"score":6.25E-1`),
		rep(pr, `"step":3`, `"step":-0`),
		rep(ro, `"meta":{"lang":"python","task":"t17"}`, `"meta":{}`),
		rep(ro, `"meta":{"lang":"python","task":"t17"}`, `"meta":null`),
		rep(ro, `"meta":{"lang":"python","task":"t17"}`, `"meta":{"lang":"py\tthon","":"x"}`),
		rep(st, `"groups":[`, `"groups":[ `),
		rep(ca, `"break_x":[0.05,0.35,0.8],"break_y":[0.1,0.3,0.3]`, `"break_x":[],"break_y":null`),
		rep(ca, `"state":"AAEC+vs="`, `"state":"AAEC\u002bvs="`),
		rep(ca, `"state":"AAEC+vs="`, `"state":""`),
	}
}

func TestDecodeFastPath(t *testing.T) {
	for _, g := range validGolden() {
		if !strings.HasSuffix(g.file, ".json") {
			continue // the binary calibration snapshot has no JSON path
		}
		b, err := os.ReadFile(filepath.Join("testdata", "golden", g.file))
		if err != nil {
			t.Fatal(err)
		}
		if n := diffAll(t, b); n != 1 {
			t.Errorf("%s: %d record types took the fast path, want 1", g.file, n)
		}
	}
	for _, v := range fastVariants(t) {
		if n := diffAll(t, []byte(v)); n != 1 {
			t.Errorf("%s: %d record types took the fast path, want 1", v, n)
		}
	}
	// Valid, but left to the slow path: escaped key names and schema.
	pr, _ := EncodePredicted(samplePredicted())
	for _, v := range []string{
		strings.Replace(string(pr), `"run_id"`, `"run\u005fid"`, 1),
		strings.Replace(string(pr), `"wmrl.reward.predicted.v1"`, `"wmrl.reward.predicted\u002ev1"`, 1),
	} {
		if n := diffAll(t, []byte(v)); n != 0 {
			t.Errorf("%s: fast path taken", v)
		}
		if _, err := DecodePredicted([]byte(v)); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// TestDecodeFastMatchesSlowOnInvalid runs the differential check over every invalid golden
// record and the strict-decoding table's inputs.
func TestDecodeFastMatchesSlowOnInvalid(t *testing.T) {
	for _, c := range invalidGolden(t) {
		diffAll(t, c.data)
	}
	for _, s := range fuzzSeeds(t) {
		diffAll(t, s)
	}
}

// fuzzSeeds collects the golden records, the fast-path variants and the other decoders' fuzz
// corpora (which hold many invalid records).
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

// FuzzDecodeFastMatchesSlow is the differential target: on any bytes, decodeJSON with its fast
// path must give exactly what the token-scanning decodeJSONSlow gives, for every record type.
func FuzzDecodeFastMatchesSlow(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		diffAll(t, b)
	})
}
