package topics

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestProtoGolden: the Protobuf bytes of each sample are fixed under testdata/golden/protobuf/
// (the same samples as the JSON goldens, so a reader in another language can check one against
// the other: python/tests/test_wirepb.py does), and decode back to the sample.
func TestProtoGolden(t *testing.T) {
	names := map[string][]string{
		"rollout": {"rollout"}, "step": {"step", "step_policy_step", "step_end"},
		"predicted": {"predicted"}, "executed": {"executed", "executed_imputed"},
	}
	for _, c := range protoCases() {
		for i, v := range c.samples {
			if i >= len(names[c.name]) {
				continue
			}
			file := filepath.Join("protobuf", names[c.name][i]+".bin")
			b, err := c.enc(v)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			goldenFile(t, file, b)
			got, err := c.dec(b)
			if err != nil || !reflect.DeepEqual(got, v) {
				t.Errorf("%s: decoded %+v, %v", file, got, err)
			}
		}
	}
}

// FuzzDecodeProto: no input panics a Protobuf decoder; whatever one accepts the generated code
// decodes to the same value, and it re-encodes to bytes that decode to that value again.
func FuzzDecodeProto(f *testing.F) {
	cases := protoCases()
	for i, c := range cases {
		for _, v := range c.samples {
			b, err := c.enc(v)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), b)
			f.Add(uint8(i), appendUnknownField(b))
		}
	}
	entries, _ := os.ReadDir(filepath.Join("testdata", "golden", "protobuf"))
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "golden", "protobuf", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		for i, c := range cases {
			if strings.HasPrefix(e.Name(), c.name) {
				f.Add(uint8(i), b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		c := cases[int(which)%len(cases)]
		v, err := c.dec(b)
		if err != nil {
			return
		}
		checkAgainstGenerated(t, c, b)
		again, err := c.enc(v)
		if err != nil {
			t.Fatalf("%s: decoded %+v does not re-encode: %v", c.name, v, err)
		}
		v2, err := c.dec(again)
		if err != nil || !reflect.DeepEqual(v, v2) {
			t.Fatalf("%s: re-encoded %x decodes to %+v, %v; want %+v", c.name, again, v2, err, v)
		}
		if !bytes.Equal(again, mustEnc(t, c, v2)) {
			t.Fatalf("%s: encoding is not deterministic", c.name)
		}
	})
}

func mustEnc(t *testing.T, c protoCase, v any) []byte {
	t.Helper()
	b, err := c.enc(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
