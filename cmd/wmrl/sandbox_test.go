package main

import (
	"reflect"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"1048576", 1 << 20, true},
		{"4GiB", 4 << 30, true},
		{"4G", 4 << 30, true},
		{"512MiB", 512 << 20, true},
		{"512 mi", 512 << 20, true},
		{"1.5K", 1536, true},
		{"2TiB", 2 << 40, true},
		{"10b", 10, true},
		{"", 0, false},
		{"-1", 0, false},
		{"4GB", 0, false},
		{"1.3", 0, false},
		{"abc", 0, false},
		{"99999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseArgv(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
		ok   bool
	}{
		{[]string{"python3", "{artifact}"}, []string{"python3", "{artifact}"}, true},
		{[]string{`["python3", "-u", "{artifact}"]`}, []string{"python3", "-u", "{artifact}"}, true},
		{[]string{"/bin/true"}, []string{"/bin/true"}, true},
		{[]string{`["python3", 3]`}, nil, false},
		{[]string{`[]`}, nil, false},
		{nil, nil, false},
		{[]string{""}, nil, false},
	}
	for _, tt := range tests {
		got, err := parseArgv(tt.in)
		if (err == nil) != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseArgv(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseRunAs(t *testing.T) {
	if r, err := parseRunAs("1000:1001"); err != nil || r.UID != 1000 || r.GID != 1001 {
		t.Errorf("parseRunAs(1000:1001) = %+v, %v", r, err)
	}
	for _, bad := range []string{"1000", "a:b", "1000:", "-1:0"} {
		if _, err := parseRunAs(bad); err == nil {
			t.Errorf("parseRunAs(%q) succeeded", bad)
		}
	}
}
