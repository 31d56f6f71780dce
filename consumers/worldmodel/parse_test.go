package worldmodel

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseScore(t *testing.T) {
	tests := []struct {
		name    string
		reply   string
		want    float64
		wantErr string // substring of the error; empty means success
	}{
		{name: "json object", reply: `{"score": 0.73}`, want: 0.73},
		{name: "json object with whitespace", reply: "\n  {\"score\":1}\n", want: 1},
		{name: "key case-insensitive", reply: `{"Score": 0.25, "reason": "ok"}`, want: 0.25},
		{name: "numeric string value", reply: `{"score": "0.6"}`, want: 0.6},
		{name: "bare json number", reply: `0.42`, want: 0.42},
		{name: "exponent", reply: `{"score": 5e-1}`, want: 0.5},
		{name: "json fence", reply: "Here you go:\n```json\n{\"score\": 0.9}\n```\n", want: 0.9},
		{name: "plain fence", reply: "```\n{\"score\": 0.15}\n```", want: 0.15},
		{name: "last fence wins", reply: "```json\n{\"score\": 0.1}\n```\nRevised:\n```json\n{\"score\": 0.2}\n```", want: 0.2},
		{name: "json surrounded by text", reply: `I think {"score": 0.35} is fair given 3 bugs.`, want: 0.35},
		{name: "nested score key", reply: `{"result": {"score": 0.55}}`, want: 0.55},
		{name: "last score key wins", reply: `format {"score": 0.5}; answer {"score": 0.8}`, want: 0.8},
		{name: "score key before other fields", reply: `{"reason": "solid, 2 minor issues", "score": 0.7}`, want: 0.7},
		{name: "last number", reply: "Predicted score: 0.64", want: 0.64},
		{name: "last number trailing period", reply: "Out of 3 runs, I'd estimate 0.5.", want: 0.5},
		{name: "integer", reply: "Score 1", want: 1},
		{name: "dash is a range not a sign", reply: "on a scale 0-1", want: 1},
		{name: "negative number", reply: "score: -0.2", want: -0.2},
		{name: "leading dot", reply: "about .75", want: 0.75},
		{name: "think block ignored", reply: "<think>maybe 0.2, or 0.9</think>\n{\"score\": 0.4}", want: 0.4},
		{name: "closing think only", reply: "reasoning about 7 cases...</think>0.3", want: 0.3},
		{name: "out of range is not the parser's business", reply: `{"score": 1.7}`, want: 1.7},

		{name: "empty", reply: "", wantErr: "empty reply"},
		{name: "only whitespace", reply: " \n\t", wantErr: "empty reply"},
		{name: "no number", reply: "I cannot judge this solution.", wantErr: "no number"},
		{name: "null score", reply: `{"score": null, "note": "3 files missing"}`, wantErr: "null"},
		{name: "string score", reply: `{"score": "high"}`, wantErr: "non-numeric"},
		{name: "bool score", reply: `{"score": true}`, wantErr: "boolean"},
		{name: "score key without number in prose", reply: `"score": unknown, tried 3 times`, wantErr: "not followed by a number"},
		{name: "unclosed think", reply: "<think>the score is 0.8 probably", wantErr: "unclosed <think>"},
		{name: "overflow", reply: `{"score": 1e999}`, wantErr: "not a finite number"},
		{name: "think then nothing", reply: "<think>0.5</think>", wantErr: "empty reply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseScore(tt.reply)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseScore(%q) = %v, want error containing %q", tt.reply, got, tt.wantErr)
				}
				if !errors.Is(err, ErrNoScore) {
					t.Errorf("error %v does not wrap ErrNoScore", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseScore(%q): %v", tt.reply, err)
			}
			if got != tt.want {
				t.Errorf("ParseScore(%q) = %v, want %v", tt.reply, got, tt.want)
			}
		})
	}
}

func TestExcerpt(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"multi\nline\t text", 100, "multi line text"},
		{"abcdef", 3, "abc…"},
		{"héllo", 2, "h…"}, // é is two bytes; the cut backs off to a rune start
		{"bad\xffbyte", 100, "bad\uFFFDbyte"},
	}
	for _, tt := range tests {
		if got := excerpt(tt.in, tt.n); got != tt.want {
			t.Errorf("excerpt(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// FuzzParseScore checks that the parser never panics, only ever returns finite numbers, wraps
// ErrNoScore on failure, and reads back the canonical reply form of any score it returns.
// Seed corpus: testdata/fuzz/FuzzParseScore.
func FuzzParseScore(f *testing.F) {
	f.Fuzz(func(t *testing.T, reply string) {
		v, err := ParseScore(reply)
		if err != nil {
			if !errors.Is(err, ErrNoScore) {
				t.Fatalf("error %v does not wrap ErrNoScore", err)
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("ParseScore(%q) = %v, not finite", reply, v)
		}
		for _, canonical := range []string{
			`{"score": ` + strconv.FormatFloat(v, 'g', -1, 64) + `}`,
			"The answer is " + strconv.FormatFloat(v, 'f', -1, 64),
		} {
			back, err := ParseScore(canonical)
			if err != nil || back != v {
				t.Fatalf("ParseScore(%q) = %v, %v; want %v (from reply %q)", canonical, back, err, v, reply)
			}
		}
	})
}
