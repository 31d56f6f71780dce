package conn

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrRedisURL is wrapped by every error about the form of --redis (not about reaching it).
var ErrRedisURL = errors.New("invalid Redis URL")

// Redis deployments a --redis URL can name.
const (
	RedisSingle   = "single"
	RedisCluster  = "cluster"
	RedisSentinel = "sentinel"
)

// RedisTarget is a parsed --redis: exactly one of Single, Cluster and Failover is set.
type RedisTarget struct {
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// Kind is RedisSingle, RedisCluster or RedisSentinel.
func (t RedisTarget) Kind() string {
	switch {
	case t.Cluster != nil:
		return RedisCluster
	case t.Failover != nil:
		return RedisSentinel
	}
	return RedisSingle
}

// TLS reports whether the connection uses TLS.
func (t RedisTarget) TLS() bool {
	switch {
	case t.Cluster != nil:
		return t.Cluster.TLSConfig != nil
	case t.Failover != nil:
		return t.Failover.TLSConfig != nil
	}
	return t.Single != nil && t.Single.TLSConfig != nil
}

// Client builds the go-redis client for the target: redis.NewClient, NewClusterClient or
// NewFailoverClient. contextTimeout makes dials and commands honour the caller's context
// deadline (go-redis otherwise runs them on its own timeouts), for start-up checks.
func (t RedisTarget) Client(contextTimeout bool) redis.UniversalClient {
	switch {
	case t.Cluster != nil:
		o := *t.Cluster
		o.ContextTimeoutEnabled = o.ContextTimeoutEnabled || contextTimeout
		return redis.NewClusterClient(&o)
	case t.Failover != nil:
		o := *t.Failover
		o.ContextTimeoutEnabled = o.ContextTimeoutEnabled || contextTimeout
		return redis.NewFailoverClient(&o)
	}
	o := *t.Single
	o.ContextTimeoutEnabled = o.ContextTimeoutEnabled || contextTimeout
	return redis.NewClient(&o)
}

// RedisTarget parses --redis. Besides a single node (redis://, rediss://, see RedisOptions) it
// accepts a Redis Cluster and a Sentinel-managed master:
//
//	redis://[user:pass@]h1:7000,h2:7001[?opts]          cluster (several seeds)
//	redis-cluster://[user:pass@]host:7000[?opts]         cluster behind one seed address
//	redis://h1:7000?addr=h2:7001                         cluster, go-redis's ParseClusterURL form
//	redis-sentinel://[user:pass@]h1:26379,h2:26379/mymaster[/db][?opts]
//	                                                     Sentinel: seeds are sentinels, then the master set
//	redis://h1:26379?master_name=mymaster&addr=...       Sentinel, go-redis's ParseFailoverURL form
//
// rediss, rediss-cluster and rediss-sentinel use TLS (with --redis-tls-*). In the
// redis-sentinel form the user and password (or --redis-password-file) authenticate against
// the master and replicas; the sentinels are asked without AUTH. A cluster has only database 0.
// opts are go-redis's query options (dial_timeout, pool_size, ...).
func (o Options) RedisTarget() (RedisTarget, error) {
	scheme, rest, ok := strings.Cut(o.RedisURL, "://")
	if !ok {
		// Let go-redis name the problem.
		ro, err := o.RedisOptions()
		return RedisTarget{Single: ro}, err
	}
	base, kind := scheme, ""
	if b, k, ok := strings.Cut(scheme, "-"); ok {
		base, kind = b, k
	}
	if base != "redis" && base != "rediss" || kind != "" && kind != RedisCluster && kind != RedisSentinel {
		return RedisTarget{}, fmt.Errorf("%w (%s): scheme %s: use redis, rediss, redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel", ErrRedisURL, RedactURL(o.RedisURL), scheme)
	}
	u, err := url.Parse(base + "://" + rest)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return RedisTarget{}, fmt.Errorf("%w (%s): %w", ErrRedisURL, RedactURL(o.RedisURL), err)
	}
	hosts := strings.Split(u.Host, ",")
	q := u.Query()
	switch {
	case kind == RedisSentinel:
		return o.sentinelTarget(u, hosts)
	case kind == "" && len(hosts) == 1 && q.Has("master_name"):
		fo, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return RedisTarget{}, fmt.Errorf("%w (%s): %w", ErrRedisURL, RedactURL(o.RedisURL), err)
		}
		return o.finish(RedisTarget{Failover: fo})
	case kind == RedisCluster || len(hosts) > 1 || q.Has("addr"):
		return o.clusterTarget(u, hosts)
	}
	ro, err := o.RedisOptions()
	return RedisTarget{Single: ro}, err
}

// clusterTarget turns several seeds into go-redis's cluster URL (the first seed as host, the
// others as addr parameters).
func (o Options) clusterTarget(u *url.URL, hosts []string) (RedisTarget, error) {
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return RedisTarget{}, fmt.Errorf("%w (%s): a Redis Cluster has only database 0, not /%s", ErrRedisURL, RedactURL(o.RedisURL), p)
	}
	c := *u
	c.Path = ""
	c.Host = hosts[0]
	q := c.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	c.RawQuery = q.Encode()
	co, err := redis.ParseClusterURL(c.String())
	if err != nil {
		return RedisTarget{}, fmt.Errorf("%w (%s): %w", ErrRedisURL, RedactURL(o.RedisURL), err)
	}
	return o.finish(RedisTarget{Cluster: co})
}

// sentinelTarget parses redis-sentinel://[user:pass@]s1,s2/master[/db] with go-redis's
// failover URL parser; the user information moves from the sentinels to the master.
func (o Options) sentinelTarget(u *url.URL, hosts []string) (RedisTarget, error) {
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if len(parts) < 1 || len(parts) > 2 {
		return RedisTarget{}, fmt.Errorf("%w (%s): a Sentinel URL names the master set and optionally the database: redis-sentinel://host:26379,host2:26379/mymaster/0", ErrRedisURL, RedactURL(o.RedisURL))
	}
	c := *u
	c.User, c.Path, c.Host = nil, "", hosts[0]
	q := c.Query()
	q.Set("master_name", parts[0])
	if len(parts) == 2 {
		q.Set("db", parts[1])
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	c.RawQuery = q.Encode()
	fo, err := redis.ParseFailoverURL(c.String())
	if err != nil {
		return RedisTarget{}, fmt.Errorf("%w (%s): %w", ErrRedisURL, RedactURL(o.RedisURL), err)
	}
	if u.User != nil {
		fo.Username = u.User.Username()
		fo.Password, _ = u.User.Password()
	}
	return o.finish(RedisTarget{Failover: fo})
}

// finish applies --redis-password-file and the --redis-tls-* files to a cluster or Sentinel
// target, as RedisOptions does for a single node.
func (o Options) finish(t RedisTarget) (RedisTarget, error) {
	const notTLS = "does not use TLS (rediss, rediss-cluster, rediss-sentinel)"
	var err error
	if t.Failover != nil {
		err = o.redisSecrets(&t.Failover.Password, t.Failover.TLSConfig, notTLS)
	} else {
		err = o.redisSecrets(&t.Cluster.Password, t.Cluster.TLSConfig, notTLS)
	}
	if err != nil {
		return RedisTarget{}, err
	}
	return t, nil
}
