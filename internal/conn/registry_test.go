package conn

import (
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics/schemareg"
)

func TestSchemaRegistryOptions(t *testing.T) {
	tests := []struct {
		name string
		reg  RegistryOptions
		nil  bool
		err  string
		ttl  time.Duration // the registry's NegativeTTL, when not 0
	}{
		{name: "none configured", nil: true},
		{name: "url only", reg: RegistryOptions{URLs: []string{"http://127.0.0.1:8481/apis/ccompat/v7"}}},
		{name: "basic auth", reg: RegistryOptions{URLs: []string{"http://r"}, User: "u", Password: "p", Compat: "FULL"}},
		{name: "bad level", reg: RegistryOptions{URLs: []string{"http://r"}, Compat: "SIDEWAYS"}, err: "--schema-compatibility"},
		{name: "password without user", reg: RegistryOptions{URLs: []string{"http://r"}, Password: "p"}, err: "without --schema-registry-user"},
		{name: "tls files on http", reg: RegistryOptions{URLs: []string{"http://r"}, TLSCA: "/nonexistent"}, err: "need an https:// URL"},
		{name: "missing ca file", reg: RegistryOptions{URLs: []string{"https://r"}, TLSCA: "/nonexistent"}, err: "schema-registry-tls-ca"},
		{name: "default negative ttl", reg: RegistryOptions{URLs: []string{"http://r"}}, ttl: schemareg.DefaultNegativeTTL},
		{name: "negative ttl set", reg: RegistryOptions{URLs: []string{"http://r"}, NegativeTTL: 5 * time.Second}, ttl: 5 * time.Second},
		{name: "negative ttl below 0", reg: RegistryOptions{URLs: []string{"http://r"}, NegativeTTL: -time.Second}, err: "--schema-registry-negative-ttl"},
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
			if tt.ttl != 0 && r.NegativeTTL() != tt.ttl {
				t.Fatalf("negative TTL %v, want %v", r.NegativeTTL(), tt.ttl)
			}
		})
	}
}
