package jail

import "testing"

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
		trunc  bool
	}{
		{"small", []string{"ab", "cd"}, "abcd", false},
		{"exact", []string{"abcdefgh"}, "abcdefgh", false},
		{"big write", []string{"0123456789"}, "23456789", true},
		{"many small", []string{"abc", "def", "ghi", "jkl", "mno", "pqr"}, "klmnopqr", true},
		{"big then small", []string{"0123456789", "xy"}, "456789xy", true},
	}
	for _, tc := range tests {
		b := newTailBuffer(8)
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("write %d, %v", n, err)
			}
		}
		if string(b.Bytes()) != tc.want || b.Truncated() != tc.trunc {
			t.Errorf("%s: %q truncated=%v, want %q %v", tc.name, b.Bytes(), b.Truncated(), tc.want, tc.trunc)
		}
	}
}
