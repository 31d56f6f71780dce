package stage

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// ErrPreflight marks a start-up check that failed: the stage cannot work with the cluster or
// Redis it was given, and retrying will not help until the operator changes something.
var ErrPreflight = errors.New("start-up check failed")

// PreflightError is one failed start-up check: what is wrong and how to fix it, in one line.
type PreflightError struct {
	What string // e.g. "kafka 127.0.0.1:1 unreachable"
	Fix  string // e.g. "check --brokers"
	Err  error  // the underlying cause, if any
}

func (e *PreflightError) Error() string {
	s := e.What
	if e.Fix != "" {
		s += " (" + e.Fix + ")"
	}
	if e.Err != nil {
		s += ": " + oneLine(e.Err.Error())
	}
	return s
}

// Unwrap lets callers test errors.Is(err, ErrPreflight) and reach the cause.
func (e *PreflightError) Unwrap() []error { return []error{ErrPreflight, e.Err} }

// KafkaCheck says what a stage needs of its cluster.
type KafkaCheck struct {
	KafkaOpts []kgo.Opt
	Brokers   string // for messages only, e.g. "kafka-1:9092,kafka-2:9092"
	Names     topics.Names
	// Topics must exist; the co-partitioned ones among them must share one partition count.
	Topics  []string
	Timeout time.Duration // default 30s
}

// CheckKafka verifies within the timeout that the cluster answers with these credentials and
// that the topics exist with one partition count where records of a run must meet. A stage
// calls it before joining its group, so a wrong address or a missing `wmrl topics create`
// fails at once with a fix instead of hanging in a poll loop.
func CheckKafka(ctx context.Context, c KafkaCheck) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, 30*time.Second))
	defer cancel()
	cl, err := kgo.NewClient(c.KafkaOpts...)
	if err != nil {
		return &PreflightError{What: "kafka client options are invalid", Fix: "check --brokers and the SASL/TLS flags", Err: err}
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.ApiVersions(ctx); err != nil {
		return kafkaReachError(c.Brokers, err)
	}
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		return kafkaReachError(c.Brokers, err)
	}
	ms, err := topicadmin.CheckLayout(ctx, adm, c.Names, c.Topics)
	if err != nil {
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return &PreflightError{What: "not authorized to describe the wmrl topics", Fix: "grant this principal DESCRIBE on them", Err: err}
		}
		return kafkaReachError(c.Brokers, err)
	}
	for _, m := range ms {
		if m.Field == "existence" {
			return &PreflightError{What: fmt.Sprintf("topic %s does not exist", m.Topic),
				Fix: fmt.Sprintf("run `wmrl topics create --topic-prefix %s`, or fix --topic-prefix", c.Names.EffectivePrefix())}
		}
	}
	if len(ms) > 0 {
		return &PreflightError{What: ms[0].String(), Fix: "run `wmrl topics check` and recreate the topics with one partition count"}
	}
	return nil
}

// kafkaReachError turns a failed first request into the most likely cause and its fix.
func kafkaReachError(brokers string, err error) error {
	at := "kafka"
	if brokers != "" {
		at += " " + brokers
	}
	msg := err.Error()
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	switch {
	case errors.As(err, &uerr):
		return &PreflightError{What: at + ": server certificate not trusted", Fix: "set --tls-ca to the CA that signed the broker's certificate", Err: err}
	case errors.As(err, &herr):
		return &PreflightError{What: at + ": server certificate does not match the host name", Fix: "set --tls-server-name to a name in the certificate", Err: err}
	case errors.As(err, &cerr):
		return &PreflightError{What: at + ": server certificate invalid", Fix: "check the broker's certificate and --tls-ca", Err: err}
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return &PreflightError{What: at + ": SASL authentication failed", Fix: "check --sasl-user, --sasl-password and --sasl-mechanism", Err: err}
	case errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return &PreflightError{What: at + ": the listener does not accept this SASL mechanism", Fix: "check --sasl-mechanism and that the port is the SASL listener", Err: err}
	case strings.Contains(msg, "first record does not look like a TLS handshake"), strings.Contains(msg, "tls: "):
		return &PreflightError{What: at + ": TLS handshake failed", Fix: "use --tls only against a TLS listener (and drop it for a plaintext one)", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &PreflightError{What: at + " did not answer in time", Fix: "check --brokers, the network, and --tls/--sasl-* against the listener's protocol", Err: err}
	}
	var nerr net.Error
	if errors.As(err, &nerr) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") {
		return &PreflightError{What: at + " unreachable", Fix: "check --brokers (WMRL_BROKERS) and that the broker runs", Err: err}
	}
	return &PreflightError{What: at + ": first request failed", Fix: "check --brokers and the SASL/TLS flags", Err: err}
}

// CheckRedis verifies within the timeout that Redis answers a PING with these credentials.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(timeout, 30*time.Second))
	defer cancel()
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"):
		return &PreflightError{What: "redis refused the credentials", Fix: "put user:password in the --redis URL", Err: err}
	case strings.Contains(msg, "x509") || strings.Contains(msg, "tls:"):
		return &PreflightError{What: "redis TLS handshake failed", Fix: "use rediss:// only against a TLS port, with a trusted certificate", Err: err}
	}
	return &PreflightError{What: "redis did not answer", Fix: "check --redis (WMRL_REDIS) and that redis-server runs", Err: err}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
