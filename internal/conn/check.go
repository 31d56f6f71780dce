package conn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CheckTimeout bounds Check (a caller's earlier deadline wins): long enough for a slow cluster to answer
// one request, short enough that a misconfigured stage fails while its operator still watches.
const CheckTimeout = 15 * time.Second

// withDeadline bounds ctx by d or the caller's deadline (the CLI's start-up deadline), whichever
// comes first, and returns the time the check has, for the hint of a timeout. A later caller
// deadline does not stretch a check: a plaintext Redis reads a TLS ClientHello as an unfinished
// command and never answers, so only the bound ends that wait.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc, time.Duration) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, time.Until(dl).Round(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, cancel, d
}

// Check makes one metadata round trip with opts. A long-running stage would otherwise retry a
// wrong password, an untrusted certificate or plaintext against a TLS listener forever without
// saying why; with Check it ends at once with an error that names the cause and the option to fix.
func Check(ctx context.Context, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel, limit := withDeadline(ctx, CheckTimeout)
	defer cancel()
	if _, err = kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		return fmt.Errorf("kafka: %s: %w", kafkaHint(err, limit), err)
	}
	return nil
}

// kafkaHint says in operator terms what a failed first request most likely means.
func kafkaHint(err error, limit time.Duration) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordHeader tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "authentication failed: check --sasl-user, the password (--sasl-password-file, WMRL_SASL_PASSWORD) and --sasl-mechanism"
	case errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "the listener does not accept this SASL mechanism: check --sasl-mechanism and that the port is a SASL listener"
	case errors.As(err, &unknownCA):
		return "the broker's certificate is not signed by a CA in --tls-ca (or the system roots without it)"
	case errors.As(err, &hostname):
		return "the broker's certificate is not valid for the name dialled: use a name it lists in --brokers, or set --tls-server-name"
	case errors.As(err, &invalid):
		return "the broker's certificate is invalid (expired, not yet valid or not for server use)"
	case errors.As(err, &recordHeader), strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "TLS was requested but the listener speaks plaintext: drop --tls/--tls-* or use the TLS port"
	case strings.Contains(msg, "speaking to a tls endpoint"):
		return "the listener speaks TLS but the client does not: add --tls (and --tls-ca)"
	case strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "certificate required"):
		return "the listener requires a client certificate it trusts: set --tls-cert and --tls-key"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at the seed brokers: check --brokers"
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no broker answered within %v: check --brokers, and --tls for a TLS listener", limit)
	}
	return "the brokers could not be reached"
}

// RedisCheckTimeout bounds CheckRedis (a caller's earlier deadline wins); a healthy Redis answers PING in
// well under a millisecond.
const RedisCheckTimeout = 8 * time.Second

// CheckRedis sends one PING (for a Sentinel target: asks the sentinels for the master and pings
// it; for a cluster: loads the slot map and pings a node), with the same purpose as Check.
// useTLS tailors the hint of a timeout.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, useTLS bool) error {
	ctx, cancel, limit := withDeadline(ctx, RedisCheckTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %s: %w", redisHint(err, useTLS, limit), err)
	}
	// A single-node client answers PING from a cluster node too, and then fails every write of
	// a slot that node does not serve (MOVED). A server that refuses INFO is not judged.
	if single, ok := rdb.(*redis.Client); ok {
		if info, err := single.Info(ctx, "cluster").Result(); err == nil && strings.Contains(info, "cluster_enabled:1") {
			return fmt.Errorf("redis: %w: list its seeds (redis://h1:7000,h2:7001) or use redis-cluster://host:port", ErrRedisIsCluster)
		}
	}
	return nil
}

// ErrRedisIsCluster: a single-node Redis URL names a node of a Redis Cluster.
var ErrRedisIsCluster = errors.New("the server is a Redis Cluster node")

// timedOut: the deadline passed, as the context's or as a socket read timeout (go-redis reports
// either, depending on where the wait was).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func redisHint(err error, useTLS bool, limit time.Duration) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var recordHeader tls.RecordHeaderError
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return "authentication failed: check the user and password in the Redis URL (--redis, WMRL_REDIS) or --redis-password-file"
	case strings.HasPrefix(msg, "NOAUTH"):
		return "the server requires a password: give it in --redis-password-file (or the Redis URL, redis://:password@host)"
	case errors.As(err, &unknownCA):
		return "the server's certificate is not signed by a CA in --redis-tls-ca (or the system roots without it)"
	case errors.As(err, &hostname):
		return "the server's certificate is not valid for the host in the Redis URL"
	case errors.As(err, &recordHeader), strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "rediss:// (TLS) was requested but the server speaks plaintext: use redis://"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return "the server closed the connection: if it is a TLS port, use rediss://"
	case strings.Contains(msg, "all sentinels specified in configuration are unreachable"):
		return "no sentinel named a master: check the sentinel hosts and the master set name (redis-sentinel://host:26379,host2:26379/<master>)"
	case strings.Contains(msg, "cluster support disabled"):
		return "the seeds are not a Redis Cluster: give one address (redis://host:port/db) for a single server"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: check the host and port of --redis"
	case timedOut(err) && useTLS:
		// A plaintext Redis reads a TLS ClientHello as an unfinished inline command and waits.
		return fmt.Sprintf("no TLS handshake within %v: if the server speaks plaintext, use redis://", limit)
	case timedOut(err):
		return fmt.Sprintf("no answer within %v: if it is a TLS port, use rediss://", limit)
	}
	return "the server could not be reached"
}
