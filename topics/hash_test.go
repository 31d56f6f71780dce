package topics

import (
	"strconv"
	"testing"
)

func TestAnchorHashGolden(t *testing.T) {
	// Independently computed with Python:
	//   u = int.from_bytes(hashlib.sha256(f"{run}\0{group}".encode()).digest()[:8], "big"); (u >> 11) / 2**53
	tests := []struct {
		run, group string
		u          uint64
		h          float64
	}{
		{"r1", "g0", 13178081310034204266, 0.7143852192764852},
		{"r1", "g1", 6078554841537079168, 0.329519118238339},
		{"run-0001", "g000", 8900453289200436809, 0.4824945396128433},
		{"", "", 7940984811893783192, 0.4304816492364817},
	}
	for _, tt := range tests {
		got := AnchorHashUint64(tt.run, tt.group)
		if got != tt.u {
			t.Errorf("AnchorHashUint64(%q,%q) = %d, want %d", tt.run, tt.group, got, tt.u)
		}
		if h := AnchorHash(tt.run, tt.group); h != tt.h {
			t.Errorf("AnchorHash(%q,%q) = %v, want %v", tt.run, tt.group, h, tt.h)
		}
	}
	// ("ab","c") and ("a","bc") must differ: the separator is part of the hash.
	if AnchorHash("ab", "c") == AnchorHash("a", "bc") {
		t.Error("separator ignored")
	}
	if IsAnchor("r1", "g0", 0) || !IsAnchor("r1", "g0", 1) || IsAnchor("r1", "g1", 0.3) || !IsAnchor("r1", "g1", 0.33) {
		t.Error("IsAnchor thresholds")
	}
}

func TestAnchorFraction(t *testing.T) {
	// Over many groups the selected share approaches the fraction (a biased hash would not).
	n, hit := 20000, 0
	for i := 0; i < n; i++ {
		if IsAnchor("run-7", "g"+strconv.Itoa(i), 0.2) {
			hit++
		}
	}
	if share := float64(hit) / float64(n); share < 0.19 || share > 0.21 {
		t.Errorf("share %.4f for fraction 0.2", share)
	}
}
