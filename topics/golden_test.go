package topics

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files and fuzz seed corpora under testdata/")

// goldenFile compares want with testdata/golden/name byte for byte, or writes it under -update.
func goldenFile(t *testing.T, name string, want []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./topics -run TestGolden -update`)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the code produces; if the change is intended, rerun with -update\n got %q\nwant %q", path, got, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// validGolden lists the valid record files and how to encode and decode them.
func validGolden() []struct {
	file, schema string
	value        any
	encode       func() ([]byte, error)
} {
	r, s, p, e, i, c := sampleRollout(), sampleStep(), samplePredicted(), sampleExecuted(), sampleImputed(), sampleCalibration()
	sp, cd, se := sampleStepPolicyStep(), sampleCalibrationDebias(), sampleStepEnd()
	ce, cg := sampleCalibrationEnd(), sampleCalibrationGate()
	return []struct {
		file, schema string
		value        any
		encode       func() ([]byte, error)
	}{
		{"rollout.json", SchemaRollout, r, func() ([]byte, error) { return EncodeRollout(r) }},
		{"step.json", SchemaStep, s, func() ([]byte, error) { return EncodeStep(s) }},
		{"step_policy_step.json", SchemaStep, sp, func() ([]byte, error) { return EncodeStep(sp) }},
		{"step_end.json", SchemaStep, se, func() ([]byte, error) { return EncodeStep(se) }},
		{"predicted.json", SchemaPredicted, p, func() ([]byte, error) { return EncodePredicted(p) }},
		{"executed.json", SchemaExecuted, e, func() ([]byte, error) { return EncodeExecuted(e) }},
		{"executed_imputed.json", SchemaExecuted, i, func() ([]byte, error) { return EncodeExecuted(i) }},
		{"calibration.bin", SchemaCalibration, c, func() ([]byte, error) { return EncodeCalibration(c) }},
		{"calibration_debias.bin", SchemaCalibration, cd, func() ([]byte, error) { return EncodeCalibration(cd) }},
		{"calibration_gate.bin", SchemaCalibration, cg, func() ([]byte, error) { return EncodeCalibration(cg) }},
		{"calibration_end.bin", SchemaCalibrationEnd, ce, func() ([]byte, error) { return EncodeCalibrationEnd(ce) }},
	}
}

type invalidCase struct {
	file, schema, reason string
	data                 []byte
}

// invalidGolden derives invalid records from the valid ones, one broken rule each.
func invalidGolden(t *testing.T) []invalidCase {
	enc := func(f func() ([]byte, error)) string {
		b, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ro := enc(func() ([]byte, error) { return EncodeRollout(sampleRollout()) })
	st := enc(func() ([]byte, error) { return EncodeStep(sampleStep()) })
	sp := enc(func() ([]byte, error) { return EncodeStep(sampleStepPolicyStep()) })
	se := enc(func() ([]byte, error) { return EncodeStep(sampleStepEnd()) })
	pr := enc(func() ([]byte, error) { return EncodePredicted(samplePredicted()) })
	ex := enc(func() ([]byte, error) { return EncodeExecuted(sampleExecuted()) })
	im := enc(func() ([]byte, error) { return EncodeExecuted(sampleImputed()) })
	cb := enc(func() ([]byte, error) { return EncodeCalibration(sampleCalibration()) })
	badDebias := sampleCalibrationDebias()
	badDebias.Debias.Flattened = 3
	cdb := enc(func() ([]byte, error) { return EncodeCalibration(sampleCalibrationDebias()) })
	ce := enc(func() ([]byte, error) { return EncodeCalibrationEnd(sampleCalibrationEnd()) })
	cg := enc(func() ([]byte, error) { return EncodeCalibration(sampleCalibrationGate()) })
	badGate := sampleCalibrationGate()
	badGate.Gate.Rho = 1.5
	decreasing := sampleCalibration()
	decreasing.BreakY = []float64{0.1, 0.3, 0.2}
	rep := func(s, old, new string) []byte {
		if !strings.Contains(s, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return []byte(strings.Replace(s, old, new, 1))
	}
	return []invalidCase{
		{"predicted_score_out_of_range.json", SchemaPredicted, "invalid-field:score", rep(pr, `"score":0.625`, `"score":1.5`)},
		{"predicted_ok_without_score.json", SchemaPredicted, "invalid-field:score", rep(pr, `"score":0.625,`, ``)},
		{"predicted_duplicate_key.json", SchemaPredicted, "invalid-field:status", rep(pr, `"status":"ok"`, `"status":"ok","status":"error"`)},
		{"predicted_failure_without_reason.json", SchemaPredicted, "invalid-field:reason", rep(pr, `"score":0.625,"status":"ok"`, `"status":"timeout"`)},
		{"rollout_slash_in_run_id.json", SchemaRollout, "invalid-field:run_id", rep(ro, `"run_id":"r1"`, `"run_id":"r1/x"`)},
		{"rollout_unknown_schema.json", SchemaRollout, "unknown-schema", rep(ro, SchemaRollout, "wmrl.rollout.v2")},
		{"rollout_missing_schema.json", SchemaRollout, "unknown-schema", rep(ro, `"schema":"wmrl.rollout.v1",`, ``)},
		{"rollout_meta_invalid_utf8.json", SchemaRollout, "invalid-field:meta.task", rep(ro, `"task":"t17"`, "\"task\":\"t\xff17\"")},
		{"rollout_prompt_lone_surrogate.json", SchemaRollout, "invalid-field:prompt", rep(ro, `"prompt":"fit`, `"prompt":"\udc00fit`)},
		{"step_group_id_invalid_utf8.json", SchemaStep, "invalid-field:groups[1].group_id", rep(st, `"group_id":"g3"`, "\"group_id\":\"g\xed\xa0\x80\"")},
		{"rollout_case_folded_field.json", SchemaRollout, "invalid-field:GROUP_ID", rep(ro, `"group_id"`, `"GROUP_ID"`)},
		{"executed_unknown_field.json", SchemaExecuted, "invalid-field:gpu", rep(ex, `"status"`, `"gpu":"a100","status"`)},
		{"executed_imputed_with_ok.json", SchemaExecuted, "invalid-field:imputed", rep(im, `"status":"timeout"`, `"status":"ok"`)},
		{"step_duplicate_group.json", SchemaStep, "invalid-field:groups[1].group_id", rep(st, `"group_id":"g3"`, `"group_id":"g0"`)},
		{"step_size_as_string.json", SchemaStep, "invalid-field:groups[2].size", rep(st, `"size":4`, `"size":"4"`)},
		{"step_null_step.json", SchemaStep, "invalid-field:step", rep(st, `"step":3`, `"step":null`)},
		{"step_policy_step_ahead.json", SchemaStep, "invalid-field:policy_step", rep(sp, `"policy_step":1`, `"policy_step":4`)},
		{"step_policy_step_as_string.json", SchemaStep, "invalid-field:policy_step", rep(sp, `"policy_step":1`, `"policy_step":"1"`)},
		{"step_end_with_groups.json", SchemaStep, "invalid-field:groups", rep(se, `"groups":null`, `"groups":[{"group_id":"g0","stream":"code","size":2,"anchor":false}]`)},
		{"step_end_with_policy_step.json", SchemaStep, "invalid-field:policy_step", rep(se, `"end_of_run":true`, `"policy_step":1,"end_of_run":true`)},
		// Superseded layouts (2 and 3, and JSON v1) are refused, never guessed at.
		{"calibration_layout3.bin", SchemaCalibration, "unknown-schema", rep(cdb, snapMagic, "WMRLCAL\x03")},
		{"calibration_json_v1.json", SchemaCalibration, "unknown-schema", []byte(`{"schema":"wmrl.calibration.v1","run_id":"r1"}`)},
		// The blocks byte (bit 0 debias, bit 1 trust gate) with a bit no block has.
		{"calibration_blocks_unknown_bit.bin", SchemaCalibration, "malformed-binary", rep(cb, "\x00\x03\x00\x00\x00\x9a", "\x04\x03\x00\x00\x00\x9a")},
		{"calibration_gate_closed_byte.bin", SchemaCalibration, "malformed-binary", rep(cg, "\x01\x6c\x00\x00\x00", "\x02\x6c\x00\x00\x00")},
		{"calibration_gate_rho.bin", SchemaCalibration, "invalid-field:gate.rho", appendCalibration(nil, &badGate)},
		{"calibration_decreasing_fit.bin", SchemaCalibration, "invalid-field:break_y[2]", appendCalibration(nil, &decreasing)},
		{"calibration_truncated.bin", SchemaCalibration, "malformed-binary", []byte(cb[:len(cb)-1])},
		{"calibration_trailing.bin", SchemaCalibration, "malformed-binary", []byte(cb + "\x00")},
		{"calibration_debias_flattened.bin", SchemaCalibration, "invalid-field:debias.flattened", appendCalibration(nil, &badDebias)},
		{"calibration_debias_truncated.bin", SchemaCalibration, "malformed-binary", []byte(cdb[:len(cdb)-1])},
		{"calibration_huge_count.bin", SchemaCalibration, "malformed-binary", rep(cb, "\x03\x00\x00\x00\x9a", "\xff\xff\xff\x7f\x9a")},
		{"calibration_end_truncated.bin", SchemaCalibrationEnd, "malformed-binary", []byte(ce[:len(ce)-1])},
		{"calibration_end_trailing.bin", SchemaCalibrationEnd, "malformed-binary", []byte(ce + "\x00")},
		{"calibration_end_unknown_reason.bin", SchemaCalibrationEnd, "invalid-field:reason", rep(ce, "\x06\x00marker", "\x06\x00paused")},
		{"calibration_end_slash_in_run_id.bin", SchemaCalibrationEnd, "invalid-field:run_id", rep(ce, "\x02\x00r1", "\x02\x00r/")},
	}
}

func TestGolden(t *testing.T) {
	for _, g := range validGolden() {
		b, err := g.encode()
		if err != nil {
			t.Fatalf("%s: %v", g.file, err)
		}
		if strings.HasSuffix(g.file, ".json") {
			b = append(b, '\n')
		}
		goldenFile(t, g.file, b)
		got, err := decodeAny(g.schema, b)
		if err != nil {
			t.Fatalf("%s: %v", g.file, err)
		}
		if !reflect.DeepEqual(got, g.value) {
			t.Errorf("%s does not decode to its value", g.file)
		}
	}

	cases := invalidGolden(t)
	expected := map[string]map[string]string{}
	for _, c := range cases {
		goldenFile(t, filepath.Join("invalid", c.file), c.data)
		_, err := decodeAny(c.schema, c.data)
		if got := Reason(err); got != c.reason {
			t.Errorf("%s: Reason %q, want %q (%v)", c.file, got, c.reason, err)
		}
		expected[c.file] = map[string]string{"schema": c.schema, "reason": c.reason}
	}
	goldenFile(t, filepath.Join("invalid", "expected.json"), mustJSON(t, expected))
	if !*update {
		// No stale files: every invalid example has an expectation.
		entries, err := os.ReadDir(filepath.Join("testdata", "golden", "invalid"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := expected[e.Name()]; !ok && e.Name() != "expected.json" {
				t.Errorf("stale golden file invalid/%s", e.Name())
			}
		}
	}

	rows := sampleAdvantages()
	arrows, err := EncodeAdvantages(rows)
	if err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "advantages.arrows", arrows)
	goldenFile(t, "advantages.json", mustJSON(t, rows))
	back, err := DecodeAdvantages(arrows)
	if err != nil || !reflect.DeepEqual(back, rows) {
		t.Errorf("advantages.arrows does not decode to advantages.json: %v", err)
	}
	rowsV2 := sampleAdvantagesV2()
	arrowsV2, err := EncodeAdvantages(rowsV2)
	if err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "advantages_v2.arrows", arrowsV2)
	goldenFile(t, "advantages_v2.json", mustJSON(t, rowsV2))
	if back, err := DecodeAdvantages(arrowsV2); err != nil || !reflect.DeepEqual(back, rowsV2) {
		t.Errorf("advantages_v2.arrows does not decode to advantages_v2.json: %v", err)
	}

	type anchorCase struct {
		RunID    string  `json:"run_id"`
		GroupID  string  `json:"group_id"`
		U64      string  `json:"u64"`
		Hash     float64 `json:"hash"`
		Anchor25 bool    `json:"anchor_at_0.25"`
	}
	var anchors []anchorCase
	pairs := [][2]string{{"", ""}, {"r1", "g0"}, {"r1", "g1"}, {"ab", "c"}, {"a", "bc"}, {"run-0001", "g000"}}
	for i := 0; i < 10; i++ {
		pairs = append(pairs, [2]string{"demo-run", "step-7:g" + strconv.Itoa(i)})
	}
	for _, p := range pairs {
		anchors = append(anchors, anchorCase{p[0], p[1], strconv.FormatUint(AnchorHashUint64(p[0], p[1]), 10), AnchorHash(p[0], p[1]), IsAnchor(p[0], p[1], 0.25)})
	}
	goldenFile(t, "anchor_hash.json", mustJSON(t, anchors))

	writeSeeds(t, cases, arrows, arrowsV2)
}

// writeSeeds (under -update) rewrites the seed-* files of each fuzz corpus from the golden
// examples; inputs the fuzzer found (other names) are left alone.
func writeSeeds(t *testing.T, invalid []invalidCase, arrows, arrowsV2 []byte) {
	if !*update {
		return
	}
	seeds := map[string]map[string][]byte{}
	add := func(target, name string, b []byte) {
		if seeds[target] == nil {
			seeds[target] = map[string][]byte{}
		}
		seeds[target][name] = b
	}
	targets := map[string]string{
		SchemaRollout: "FuzzDecodeRollout", SchemaStep: "FuzzDecodeStep", SchemaPredicted: "FuzzDecodePredicted",
		SchemaExecuted: "FuzzDecodeExecuted", SchemaCalibration: "FuzzDecodeCalibration",
		SchemaCalibrationEnd: "FuzzDecodeCalibrationEnd",
	}
	for _, g := range validGolden() {
		b, _ := g.encode()
		add(targets[g.schema], "seed-valid-"+strings.TrimSuffix(g.file, ".json"), b)
	}
	for _, c := range invalid {
		add(targets[c.schema], "seed-invalid-"+strings.TrimSuffix(c.file, ".json"), c.data)
	}
	add("FuzzDecodeAdvantages", "seed-valid", arrows)
	empty, _ := EncodeAdvantages(nil)
	add("FuzzDecodeAdvantages", "seed-valid-empty", empty)
	add("FuzzDecodeAdvantages", "seed-invalid-truncated", arrows[:len(arrows)/2])
	add("FuzzDecodeAdvantages", "seed-invalid-trailing", append(append([]byte(nil), arrows...), 0, 0, 0, 0))
	add("FuzzDecodeAdvantages", "seed-valid-v2", arrowsV2)
	add("FuzzDecodeAdvantages", "seed-invalid-v2-truncated", arrowsV2[:len(arrowsV2)/2])
	for target, files := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "seed-*"))
		for _, f := range old {
			_ = os.Remove(f)
		}
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(files[n])))
			if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseChunk")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{"0/1", "3/4", "4/4", "01/2", "-1/2", "1/0", "x", "999999999999999999/1000000000000000000"} {
		body := fmt.Sprintf("go test fuzz v1\nstring(%s)\n", strconv.Quote(s))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
