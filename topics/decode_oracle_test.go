package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateOracle = flag.Bool("update-oracle", false, "rewrite testdata/decode_oracle.txt from the current JSON decoder")

// oracleFile records, for each seed (the golden, invalid golden and fuzz corpus records of when it
// was written), what the JSON decoder made of the seed and of its mutations as each record type.
// The seeds are in the file, so records added to the corpora later do not change it.
var oracleFile = filepath.Join("testdata", "decode_oracle.txt")

// oracleCalibrationSchema is the schema the calibration snapshot had as JSON (v1) when the oracle
// was written. Snapshots are binary now; the JSON decoder is still held to the oracle's decisions
// on their shape (base64 bytes, float arrays, a nested optional object), as a decoder test.
const oracleCalibrationSchema = "wmrl.calibration.v1"

// mutations are the seed, its truncations and single-byte replacements, so that the order in
// which several faults of one input are reported is covered too.
func mutations(s []byte) [][]byte {
	out := [][]byte{s}
	for k := 1; k < 8; k++ {
		out = append(out, s[:len(s)*k/8])
	}
	for k, c := range []byte(`"}n1` + "\xff,[") {
		if len(s) == 0 {
			break
		}
		m := bytes.Clone(s)
		m[(len(s)*(2*k+1)/15)%len(s)] = c
		out = append(out, m)
	}
	return out
}

// oracleLine is what the JSON decoder makes of one input as one record type: the decoded value
// (as JSON, with created_at in full) or the error's Reason (which names the field), its sentinels
// and its FieldError's value.
func oracleLine[T any](b []byte, kind, want string, created func(*T) time.Time) string {
	var v T
	err := decodeJSON(b, kind, want, &v)
	if err != nil {
		var is []string
		for _, s := range []error{ErrMalformed, ErrUnknownSchema, ErrInvalid, ErrTooLarge} {
			if errors.Is(err, s) {
				is = append(is, s.Error())
			}
		}
		line := fmt.Sprintf("%s: err %s [%s]", kind, Reason(err), strings.Join(is, ","))
		var fe *FieldError
		if errors.As(err, &fe) && fe.Value != nil {
			line += fmt.Sprintf(" value=%s", showValue(fe.Value))
		}
		return line
	}
	j, jerr := json.Marshal(&v)
	if jerr != nil {
		return fmt.Sprintf("%s: ok, but does not marshal: %v", kind, jerr)
	}
	return fmt.Sprintf("%s: ok %s created=%s", kind, j, created(&v).Format(time.RFC3339Nano))
}

// oracleBlock is the oracle's lines for one seed.
func oracleBlock(seed []byte) []string {
	lines := []string{"## " + strconv.Quote(string(seed))}
	for i, b := range mutations(seed) {
		lines = append(lines, fmt.Sprintf("# %d", i),
			oracleLine(b, "rollout", SchemaRollout, func(v *Rollout) time.Time { return v.CreatedAt }),
			oracleLine(b, "step", SchemaStep, func(v *StepManifest) time.Time { return v.CreatedAt }),
			oracleLine(b, "predicted", SchemaPredicted, func(v *PredictedReward) time.Time { return v.CreatedAt }),
			oracleLine(b, "executed", SchemaExecuted, func(v *ExecutedReward) time.Time { return v.CreatedAt }),
			oracleLine(b, "calibration", oracleCalibrationSchema, func(v *CalibrationSnapshot) time.Time { return v.CreatedAt }))
	}
	return lines
}

// TestDecodeOracle holds the JSON decoder to the decisions in testdata/decode_oracle.txt, written
// by the hand-written decoder (jsonscan and a token-walking slow path) json v2 replaced: for
// every input and record type the same value, or an error with the same Reason (field path),
// sentinels and shown value.
func TestDecodeOracle(t *testing.T) {
	if *updateOracle {
		var lines []string
		seeds := fuzzSeeds(t)
		for _, c := range invalidGolden(t) {
			seeds = append(seeds, c.data)
		}
		for _, s := range seeds {
			lines = append(lines, oracleBlock(s)...)
		}
		if err := os.WriteFile(oracleFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(oracleFile)
	if err != nil {
		t.Fatal(err)
	}
	wl := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	bad, seeds, inputs := 0, 0, 0
	for i := 0; i < len(wl); {
		seed, err := strconv.Unquote(strings.TrimPrefix(wl[i], "## "))
		if !strings.HasPrefix(wl[i], "## ") || err != nil {
			t.Fatalf("line %d: want a seed, got %.80q", i+1, wl[i])
		}
		got := oracleBlock([]byte(seed))
		seeds++
		inputs += len(got) / 6
		for j, g := range got {
			if i+j >= len(wl) || wl[i+j] != g {
				if bad++; bad <= 20 {
					t.Errorf("line %d, seed %.200q:\n got %s\nwant %s", i+j+1, seed, g, wl[min(i+j, len(wl)-1)])
				}
			}
		}
		i += len(got)
	}
	if bad > 0 {
		t.Errorf("%d lines differ", bad)
	}
	if seeds < 90 || inputs < 1400 {
		t.Errorf("the oracle holds %d seeds, %d inputs: not the recorded set", seeds, inputs)
	}
}
