package conn

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/wmrl/wmrl/topics/schemareg"
)

// RegistryOptions are the schema registry's options (--schema-registry*): the Confluent REST
// API's base URLs, HTTP basic auth and TLS files, and the compatibility level wmrl sets on its
// subjects.
type RegistryOptions struct {
	URLs     []string
	User     string
	Password string
	TLSCA    string
	TLSCert  string
	TLSKey   string
	// Compat is a level name (BACKWARD, FULL_TRANSITIVE, NONE, …); empty: BACKWARD.
	Compat string
	// NegativeTTL is how long an unknown or foreign schema id is refused from memory before the
	// registry is asked again; 0: schemareg.DefaultNegativeTTL.
	NegativeTTL time.Duration
}

// Configured reports whether a registry URL is set.
func (o RegistryOptions) Configured() bool { return len(o.URLs) > 0 }

// SchemaRegistry returns a registry client for the options, or nil when none is configured. It
// does not contact the registry. Errors never repeat the password.
func (o Options) SchemaRegistry() (*schemareg.Registry, error) {
	r := o.Registry
	if !r.Configured() {
		return nil, nil
	}
	if r.NegativeTTL < 0 {
		return nil, fmt.Errorf("--schema-registry-negative-ttl %v: must not be negative", r.NegativeTTL)
	}
	cfg := schemareg.Config{URLs: r.URLs, NegativeTTL: r.NegativeTTL}
	if r.Compat != "" {
		c, err := schemareg.ParseCompat(r.Compat)
		if err != nil {
			return nil, fmt.Errorf("--schema-compatibility: %w", err)
		}
		cfg.Compat = c
	}
	if r.User != "" || r.Password != "" {
		if r.User == "" {
			return nil, fmt.Errorf("--schema-registry-password is set without --schema-registry-user")
		}
		cfg.Opts = append(cfg.Opts, sr.BasicAuth(r.User, r.Password))
	}
	if r.TLSCA != "" || r.TLSCert != "" || r.TLSKey != "" {
		for _, u := range r.URLs {
			if !strings.HasPrefix(u, "https://") {
				return nil, fmt.Errorf("--schema-registry %s: the --schema-registry-tls-* files need an https:// URL", u)
			}
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if err := loadTLSFiles(tc, "schema-registry-tls", r.TLSCA, r.TLSCert, r.TLSKey); err != nil {
			return nil, err
		}
		cfg.Opts = append(cfg.Opts, sr.DialTLSConfig(tc))
	}
	reg, err := schemareg.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--schema-registry: %w", err)
	}
	return reg, nil
}
