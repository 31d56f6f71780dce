package sandbox

import (
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// parseScore is how the executors read a program's stdout (CommandConfig's
// ScoreMin and ScoreMax; both 0 mean [0, 1]).
func parseScore(stdout []byte, min, max float64) (float64, error) {
	rng, err := newScoreRange(min, max)
	if err != nil {
		return 0, err
	}
	return rng.parse(stdout)
}

// Golden: each testdata/stdout/*.txt is a program's stdout, the matching
// .golden is what parseScore makes of it with the default range.
func TestParseScoreGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "stdout", "*.txt"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if s, err := parseScore(data, 0, 0); err != nil {
				got = "invalid: " + err.Error() + "\n"
			} else {
				got = "ok " + strconv.FormatFloat(s, 'g', -1, 64) + "\n"
			}
			golden := strings.TrimSuffix(in, ".txt") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func TestParseScoreRanges(t *testing.T) {
	tests := []struct {
		out      string
		min, max float64
		want     float64
		ok       bool
	}{
		{`{"score": -3}`, -5, 5, -3, true},
		{`{"score": 5}`, -5, 5, 5, true},
		{`{"score": 5.0001}`, -5, 5, 0, false},
		{`{"score": 0}`, 0, 0, 0, true},
		{`{"score": 1}`, 0, 0, 1, true},
		{`{"score": 1e400}`, 0, 0, 0, false},
	}
	for _, tc := range tests {
		got, err := parseScore([]byte(tc.out), tc.min, tc.max)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseScore(%q, %v, %v) = %v, %v", tc.out, tc.min, tc.max, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidScore) {
			t.Errorf("error %v does not wrap ErrInvalidScore", err)
		}
	}
	if _, err := parseScore([]byte(`{"score": 0}`), 1, 0); err == nil {
		t.Errorf("empty range accepted")
	}
}

func FuzzParseScore(f *testing.F) {
	for _, s := range []string{`{"score": 0.5}`, "log\n{\"score\": 1}\n", `{"score": "1"}`, `{"score": 1e400}`, `{"score":0.1} {}`, "", "\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		s, err := parseScore(out, 0, 0)
		if err != nil {
			if !errors.Is(err, ErrInvalidScore) {
				t.Fatalf("error %v does not wrap ErrInvalidScore", err)
			}
			return
		}
		if math.IsNaN(s) || s < 0 || s > 1 {
			t.Fatalf("accepted score %v", s)
		}
		if !strings.Contains(string(lastNonEmptyLine(out)), "score") {
			t.Fatalf("accepted %q without a score field on the last line", out)
		}
	})
}

func TestStatusNames(t *testing.T) {
	for _, s := range []Status{StatusOK, StatusTimeout, StatusError, StatusInvalid} {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Status
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%s round trip: %v %v", s, back, err)
		}
	}
	want := map[Status]string{StatusOK: "ok", StatusTimeout: "timeout", StatusError: "error", StatusInvalid: "invalid"}
	for s, n := range want {
		if s.String() != n {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), n)
		}
	}
	if _, err := Status(0).MarshalText(); !errors.Is(err, ErrUnknownStatus) {
		t.Errorf("zero status marshalled: %v", err)
	}
	if _, err := ParseStatus("crashed"); !errors.Is(err, ErrUnknownStatus) {
		t.Errorf("unknown name parsed: %v", err)
	}
}

func TestPolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": PolicyMissing, "missing": PolicyMissing, "zero": PolicyZero, " Zero ": PolicyZero} {
		if p, err := ParsePolicy(in); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, p, err)
		}
	}
	if _, err := ParsePolicy("skip"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("ParsePolicy(skip) err %v", err)
	}
	tests := []struct {
		p      Policy
		r      Result
		score  float64
		usable bool
	}{
		{PolicyMissing, Result{Status: StatusOK, Score: 0.7}, 0.7, true},
		{PolicyZero, Result{Status: StatusOK, Score: 0.7}, 0.7, true},
		{PolicyMissing, Result{Status: StatusTimeout}, 0, false},
		{PolicyZero, Result{Status: StatusTimeout}, 0, true},
		{PolicyZero, Result{Status: StatusError}, 0, false},
		{PolicyZero, Result{Status: StatusInvalid}, 0, false},
		{PolicyZero, Result{Status: StatusTimeout, canceled: true}, 0, false},
		{PolicyZero, Result{}, 0, false},
	}
	for _, tc := range tests {
		if s, ok := tc.p.Apply(tc.r); s != tc.score || ok != tc.usable {
			t.Errorf("%s.Apply(%s) = %v, %v; want %v, %v", tc.p, tc.r.Status, s, ok, tc.score, tc.usable)
		}
	}
}

func TestValidUTF8DropsSplitRune(t *testing.T) {
	s := "é-ok" // é is two bytes; drop the first to split it
	if got := validUTF8([]byte(s)[1:]); got != "-ok" {
		t.Errorf("got %q", got)
	}
	if got := validUTF8([]byte("a\xffb")); got != "a\uFFFDb" {
		t.Errorf("got %q", got)
	}
}
