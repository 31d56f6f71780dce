package task

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n got: %s\nwant: %s", name, got, want)
	}
}

func TestEncodeGolden(t *testing.T) {
	sols := []Solution{
		{},
		{Model: GradientDescent, Features: Poly2, Reg: 2, LR: 1, Iters: 2, Capacity: 3},
		{Model: KNN, Features: Standardize, Capacity: 1},
		{Model: RandomNet, Features: Fourier, Reg: 4, Capacity: 3},
		{Model: Boosting, Features: Raw, Reg: 1, LR: 3, Iters: 3},
	}
	var b bytes.Buffer
	for _, s := range sols {
		b.Write(s.Encode())
		b.WriteString("\t")
		b.WriteString(s.String())
		b.WriteString("\n")
	}
	golden(t, "encode.golden", b.Bytes())
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	// Every index combination of every decision, via the effective list plus
	// variations of the ignored decisions.
	for _, e := range EffectiveSolutions() {
		for v := range 4 {
			s := e
			s.LR, s.Iters, s.Capacity = v%len(lrValues), (v+1)%len(iterValues), (v+2)%len(kValues)
			got, err := DecodeSolution(s.Encode())
			if err != nil {
				t.Fatalf("%s: %v", s.Encode(), err)
			}
			if got != s {
				t.Fatalf("round trip %+v -> %+v", s, got)
			}
		}
	}
}

func TestDecodeSolutionErrors(t *testing.T) {
	valid := `{"model":"gd","features":"poly2","reg":0.01,"lr":0.1,"iters":100,"capacity":3}`
	if _, err := DecodeSolution([]byte(valid)); err != nil {
		t.Fatalf("valid artifact rejected: %v", err)
	}
	tests := []struct {
		name, in, field string
	}{
		{"empty", ``, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"missing", `{"model":"gd","features":"poly2","reg":0.01,"lr":0.1,"iters":100}`, `"capacity": missing`},
		{"unknown", strings.Replace(valid, `"capacity"`, `"width"`, 1), `unknown field "width"`},
		{"duplicate", strings.Replace(valid, `"features":"poly2"`, `"model":"knn"`, 1), `"model": duplicate`},
		{"bad model", strings.Replace(valid, `"gd"`, `"svm"`, 1), `"model"`},
		{"model not string", strings.Replace(valid, `"gd"`, `3`, 1), `"model": want a string`},
		{"bad features", strings.Replace(valid, `"poly2"`, `"poly3"`, 1), `"features"`},
		{"reg off grid", strings.Replace(valid, `0.01`, `0.02`, 1), `"reg"`},
		{"reg string", strings.Replace(valid, `0.01`, `"0.01"`, 1), `"reg": want a number`},
		{"lr off grid", strings.Replace(valid, `0.1,`, `1,`, 1), `"lr"`},
		{"iters off grid", strings.Replace(valid, `100`, `50`, 1), `"iters"`},
		{"iters fractional", strings.Replace(valid, `100`, `100.5`, 1), `"iters": want an integer`},
		{"capacity range", strings.Replace(valid, `"capacity":3`, `"capacity":4`, 1), `"capacity"`},
		{"capacity negative", strings.Replace(valid, `"capacity":3`, `"capacity":-1`, 1), `"capacity"`},
		{"trailing", valid + `{}`, "trailing data"},
		{"truncated", valid[:len(valid)-1], "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSolution([]byte(tt.in))
			if !errors.Is(err, ErrInvalidSolution) {
				t.Fatalf("err = %v, want ErrInvalidSolution", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %q, want it to mention %q", err, tt.field)
			}
		})
	}
}

func TestDecodeAcceptsEquivalentNumbers(t *testing.T) {
	s, err := DecodeSolution([]byte(` { "capacity":0, "iters":1e1, "lr":5e-1, "reg":1E-2, "features":"raw", "model":"ridge" } `))
	if err == nil {
		t.Fatalf("iters as 1e1 should be rejected as non-integer syntax, got %+v", s)
	}
	s, err = DecodeSolution([]byte(` { "capacity":0, "iters":10, "lr":5e-1, "reg":1E-2, "features":"raw", "model":"ridge" } `))
	if err != nil {
		t.Fatal(err)
	}
	want := Solution{Model: Ridge, Features: Raw, Reg: 2, LR: 2, Iters: 0}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}

func TestValidateAndString(t *testing.T) {
	bad := Solution{Model: Model(numModels)}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidSolution) || !strings.Contains(err.Error(), `"model"`) {
		t.Fatalf("Validate = %v", err)
	}
	if got := string(bad.Encode()); got != "null" {
		t.Fatalf("invalid Encode = %s", got)
	}
	if _, err := DecodeSolution(bad.Encode()); err == nil {
		t.Fatal("null decoded")
	}
	if s := (Solution{Reg: -1}); s.Validate() == nil || !strings.HasPrefix(s.String(), "invalid") {
		t.Fatalf("negative reg accepted: %v", s)
	}
}

func TestEffectiveSolutionsCoverEachOnce(t *testing.T) {
	all := EffectiveSolutions()
	seen := map[Solution]int{}
	for _, s := range all {
		if s.Effective() != s {
			t.Fatalf("%v is not effective", s)
		}
		seen[s]++
	}
	if len(seen) != len(all) {
		t.Fatalf("duplicates: %d distinct of %d", len(seen), len(all))
	}
	// Every full solution maps into the list.
	var c [numDecisions]int
	var walk func(d int)
	count := 0
	walk = func(d int) {
		if d == numDecisions {
			if seen[fromChoices(c).Effective()] != 1 {
				t.Fatalf("%v not covered", fromChoices(c))
			}
			count++
			return
		}
		for k := range decisionSizes[d] {
			c[d] = k
			walk(d + 1)
		}
	}
	walk(0)
	t.Logf("%d full solutions, %d effective", count, len(all))
}

func FuzzDecodeSolution(f *testing.F) {
	f.Add([]byte(`{"model":"ridge","features":"raw","reg":0,"lr":0.01,"iters":10,"capacity":0}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSolution(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidSolution) {
				t.Fatalf("error does not wrap ErrInvalidSolution: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded invalid solution: %v", err)
		}
		enc := s.Encode()
		s2, err := DecodeSolution(enc)
		if err != nil || s2 != s {
			t.Fatalf("canonical form does not round-trip: %s -> %v, %v", enc, s2, err)
		}
		if !bytes.Equal(s2.Encode(), enc) {
			t.Fatalf("encoding not canonical: %s vs %s", s2.Encode(), enc)
		}
	})
}
