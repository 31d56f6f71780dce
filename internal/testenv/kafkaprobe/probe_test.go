package kafkaprobe

import (
	"strings"
	"testing"
)

func TestInfoRelease(t *testing.T) {
	tests := []struct {
		name string
		info Info
		want string
	}{
		{"metadata version wins", Info{VersionGuess: "at least v4.4", MetadataVersion: 33,
			MetadataVersionName: "4.4-IV2: controller unregistration (KIP-1312)"}, "4.4"},
		{"exact guess", Info{VersionGuess: "v4.1", MetadataVersion: -1}, "4.1"},
		{"at least guess", Info{VersionGuess: "at least v4.4", MetadataVersion: -1}, "4.4"},
		{"older cluster", Info{VersionGuess: "v0.11.0", MetadataVersion: -1}, "0.11.0"},
		{"custom build", Info{VersionGuess: "unknown custom version at least v3.9", MetadataVersion: -1}, ""},
		{"between", Info{VersionGuess: "between v3.8 and v3.9", MetadataVersion: -1}, ""},
		{"unknown level", Info{VersionGuess: "v4.5", MetadataVersion: 40}, "4.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.info.Release(); got != tc.want {
				t.Errorf("Release() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInfoString(t *testing.T) {
	s := Info{ClusterID: "abc", Controller: 1, Brokers: []string{"127.0.0.1:9092"}, NodeID: 1,
		VersionGuess: "v4.4", MetadataVersion: -1}.String()
	for _, want := range []string{"cluster abc", "127.0.0.1:9092", "Kafka v4.4", "metadata.version none reported"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, missing %q", s, want)
		}
	}
}
