// Package conn turns the CLI's connection options (brokers, SASL, TLS, Redis URL) into franz-go
// and go-redis clients, so every stage connects the same way and a new option is added once.
package conn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/wmrl/wmrl/topics"
)

// SASL mechanisms accepted by Options.SASLMechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// ErrNoBrokers is returned when no seed broker is configured.
var ErrNoBrokers = errors.New("no Kafka brokers configured (set --brokers or WMRL_BROKERS)")

// Options holds everything needed to reach the cluster and Redis. The zero value is not usable:
// at least Brokers must be set.
type Options struct {
	Brokers     []string
	ClientID    string
	TopicPrefix string
	// Format is the wire format of the record topics (--format).
	Format topics.Format

	SASLMechanism string
	SASLUser      string
	SASLPassword  string

	TLS           bool
	TLSCA         string
	TLSCert       string
	TLSKey        string
	TLSServerName string
	// TLSSkipVerify disables certificate verification; it exists for lab clusters only.
	TLSSkipVerify bool

	// MaxBatchBytes, when positive, overrides the decompressed size above which a consumer
	// refuses a record batch (see BatchLimit).
	MaxBatchBytes int

	RedisURL string
	// RedisPassword, when set, is the Redis password (AUTH) for a URL that carries none: the CLI
	// reads it from --redis-password-file, so the URL itself is no secret.
	RedisPassword string
	// RedisTLSCA, RedisTLSCert and RedisTLSKey configure a rediss:// connection: the CA that
	// signs the server's certificate (default: the system roots) and a client certificate.
	RedisTLSCA   string
	RedisTLSCert string
	RedisTLSKey  string

	// Registry configures the schema registry (see SchemaRegistry); zero: none.
	Registry RegistryOptions
	// Framer, once set (by a command that registered the topics' schemas at start-up), goes on
	// Names: the record builders frame, the readers check schema ids (topics.Names.Registry).
	Framer topics.Framer
}

// BatchLimit is the decompressed size above which a consumer whose largest valid record is
// recordLimit bytes refuses a record batch (kgo.MaxDecompressBatchBytes): MaxBatchBytes when set
// (--max-batch-bytes), else topics.MaxBatchBytes(recordLimit).
func (o Options) BatchLimit(recordLimit int) int {
	if o.MaxBatchBytes > 0 {
		return o.MaxBatchBytes
	}
	return topics.MaxBatchBytes(recordLimit)
}

// Names returns the topic names under the configured prefix.
func (o Options) Names() topics.Names {
	n := topics.NewNames(o.TopicPrefix)
	n.Format, n.Registry = o.Format, o.Framer
	return n
}

// KafkaOpts returns the franz-go options for seeds, client id, SASL and TLS. Stage-specific
// options (groups, transactions) are appended by the caller.
func (o Options) KafkaOpts() ([]kgo.Opt, error) {
	seeds := o.Seeds()
	if len(seeds) == 0 {
		return nil, ErrNoBrokers
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	if o.ClientID != "" {
		opts = append(opts, kgo.ClientID(o.ClientID))
	}
	mech, err := o.saslMechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	tc, err := o.TLSConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// Seeds returns the seed brokers, accepting comma-separated entries.
func (o Options) Seeds() []string {
	seeds := make([]string, 0, len(o.Brokers))
	for _, b := range o.Brokers {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				seeds = append(seeds, s)
			}
		}
	}
	return seeds
}

// CheckSASLMechanism returns nil for an empty or supported mechanism, else an error listing the
// supported ones, so an unsupported mechanism (GSSAPI, OAUTHBEARER) is not mistaken for a
// missing user name.
func CheckSASLMechanism(m string) error {
	switch strings.ToUpper(m) {
	case "", SASLPlain, SASLScramSHA256, SASLScramSHA512:
		return nil
	}
	return fmt.Errorf("--sasl-mechanism %s is not supported: use %s, %s or %s", m, SASLPlain, SASLScramSHA256, SASLScramSHA512)
}

func (o Options) saslMechanism() (sasl.Mechanism, error) {
	if o.SASLMechanism == "" {
		return nil, nil
	}
	if err := CheckSASLMechanism(o.SASLMechanism); err != nil {
		return nil, err
	}
	if o.SASLUser == "" {
		return nil, fmt.Errorf("sasl-mechanism %s needs --sasl-user", o.SASLMechanism)
	}
	switch strings.ToUpper(o.SASLMechanism) {
	case SASLPlain:
		return plain.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsSha256Mechanism(), nil
	case SASLScramSHA512:
		return scram.Auth{User: o.SASLUser, Pass: o.SASLPassword}.AsSha512Mechanism(), nil
	default:
		return nil, CheckSASLMechanism(o.SASLMechanism)
	}
}

// TLSConfig returns nil when TLS is off. Setting any TLS file implies TLS. It is exported for
// clients other than franz-go (the kafka-go analytics tap).
func (o Options) TLSConfig() (*tls.Config, error) {
	if !o.TLS && o.TLSCA == "" && o.TLSCert == "" && o.TLSKey == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLSServerName, InsecureSkipVerify: o.TLSSkipVerify} //nolint:gosec // opt-in
	if err := loadTLSFiles(tc, "tls", o.TLSCA, o.TLSCert, o.TLSKey); err != nil {
		return nil, err
	}
	return tc, nil
}

// loadTLSFiles sets the root CAs and the client certificate of tc from PEM files; flag is the
// option prefix named in errors ("tls" for --tls-ca, "redis-tls" for --redis-tls-ca).
func loadTLSFiles(tc *tls.Config, flag, ca, cert, key string) error {
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("%s-ca: %w", flag, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s-ca %s: no PEM certificates found", flag, ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return fmt.Errorf("%s-cert and %s-key must be given together", flag, flag)
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("%s-cert/%s-key: %w", flag, flag, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return nil
}

// RedisOptions parses the Redis URL (redis:// or rediss:// for TLS, with optional user:password
// and /db), as go-redis does, and applies the --redis-tls-* files to a rediss:// connection.
// Errors never repeat the URL, which may hold a password.
func (o Options) RedisOptions() (*redis.Options, error) {
	if o.RedisURL == "" {
		return nil, errors.New("no Redis configured (set --redis or WMRL_REDIS)")
	}
	ro, err := redis.ParseURL(o.RedisURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("redis url (%s): %w", RedactURL(o.RedisURL), err)
	}
	if err := o.redisSecrets(&ro.Password, ro.TLSConfig, "is not rediss:// (TLS)"); err != nil {
		return nil, err
	}
	return ro, nil
}

// redisSecrets applies the Redis password (--redis-password-file) and the --redis-tls-* files to
// the password and TLS config a Redis URL parsed into (tc nil: the URL does not use TLS, which
// notTLS says in the error).
func (o Options) redisSecrets(pw *string, tc *tls.Config, notTLS string) error {
	if o.RedisPassword != "" {
		if *pw != "" {
			return fmt.Errorf("redis url (%s) has a password and a Redis password is given too: %w", RedactURL(o.RedisURL), ErrRedisPasswordTwice)
		}
		*pw = o.RedisPassword
	}
	if o.RedisTLSCA == "" && o.RedisTLSCert == "" && o.RedisTLSKey == "" {
		return nil
	}
	if tc == nil {
		return fmt.Errorf("redis-tls-ca/-cert/-key given, but the redis url (%s) %s", RedactURL(o.RedisURL), notTLS)
	}
	return loadTLSFiles(tc, "redis-tls", o.RedisTLSCA, o.RedisTLSCert, o.RedisTLSKey)
}

// ErrRedisPasswordTwice: both the Redis URL and Options.RedisPassword carry a password.
var ErrRedisPasswordTwice = errors.New("give the password once")

// URLHasPassword reports whether u (scheme://user:password@host...) carries a password. A string
// that does not parse as a URL has none here; RedisOptions reports the parse error.
func URLHasPassword(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return false
	}
	pw, ok := p.User.Password()
	return ok && pw != ""
}

// RedactURL replaces the user information of a URL (redis://user:password@host) with "***", for
// logs and errors. A string without "scheme://...@" is returned as is.
func RedactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "***" + u[at:]
}
