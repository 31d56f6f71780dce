package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/wmrl/wmrl/topics"
)

// --schema-registry implies --format protobuf, keeps an explicit protobuf and refuses an explicit
// json; without a registry the format is the flag's.
func TestRegistryImpliesProtobuf(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want topics.Format
		err  error
	}{
		{"no registry", nil, topics.FormatJSON, nil},
		{"no registry, protobuf", []string{"--format", "protobuf"}, topics.FormatProtobuf, nil},
		{"registry", []string{"--schema-registry", "http://127.0.0.1:1"}, topics.FormatProtobuf, nil},
		{"registry, protobuf", []string{"--schema-registry", "http://127.0.0.1:1", "--format", "protobuf"}, topics.FormatProtobuf, nil},
		{"registry, json", []string{"--schema-registry", "http://127.0.0.1:1", "--format", "json"}, "", errRegistryNeedsProtobuf},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
			root := newRoot(a)
			if err := root.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			err := a.resolveFormat(root)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err == nil && a.conn.Format != c.want {
				t.Fatalf("format %q, want %q", a.conn.Format, c.want)
			}
		})
	}
}
