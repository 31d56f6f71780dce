package conn

import (
	"strings"
	"testing"
)

func TestSchemaRegistryOptions(t *testing.T) {
	tests := []struct {
		name string
		reg  RegistryOptions
		nil  bool
		err  string
	}{
		{name: "none configured", nil: true},
		{name: "url only", reg: RegistryOptions{URLs: []string{"http://127.0.0.1:8481/apis/ccompat/v7"}}},
		{name: "basic auth", reg: RegistryOptions{URLs: []string{"http://r"}, User: "u", Password: "p", Compat: "FULL"}},
		{name: "bad level", reg: RegistryOptions{URLs: []string{"http://r"}, Compat: "SIDEWAYS"}, err: "--schema-compatibility"},
		{name: "password without user", reg: RegistryOptions{URLs: []string{"http://r"}, Password: "p"}, err: "without --schema-registry-user"},
		{name: "tls files on http", reg: RegistryOptions{URLs: []string{"http://r"}, TLSCA: "/nonexistent"}, err: "need an https:// URL"},
		{name: "missing ca file", reg: RegistryOptions{URLs: []string{"https://r"}, TLSCA: "/nonexistent"}, err: "schema-registry-tls-ca"},
		{name: "cert without key", reg: RegistryOptions{URLs: []string{"https://r"}, TLSCert: "/c"}, err: "schema-registry-tls-cert and schema-registry-tls-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Options{Registry: tt.reg}.SchemaRegistry()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (r == nil) != tt.nil {
				t.Fatalf("registry %v, want nil %v", r, tt.nil)
			}
		})
	}
}
