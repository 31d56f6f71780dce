package conn

import (
	"context"
	"errors"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/internal/testenv"
)

func TestRedisTarget(t *testing.T) {
	for _, tt := range []struct {
		name, url, password string
		kind                string
		addrs               []string // seeds (cluster) or sentinels
		master              string
		db                  int
		user, pass          string // of the data nodes
		tls                 bool
		wantErr             error // nil: success; errAny: any error
	}{
		{name: "single", url: "redis://u:p@h:6380/3", kind: RedisSingle, addrs: []string{"h:6380"}, db: 3, user: "u", pass: "p"},
		{name: "cluster seeds", url: "redis://u:p@h1:7000,h2:7001,h3:7002", kind: RedisCluster,
			addrs: []string{"h1:7000", "h2:7001", "h3:7002"}, user: "u", pass: "p"},
		{name: "cluster seeds with db 0 and options", url: "rediss://h1:7000,h2:7001/0?dial_timeout=3", kind: RedisCluster,
			addrs: []string{"h1:7000", "h2:7001"}, tls: true},
		{name: "cluster one seed", url: "redis-cluster://h1:7000", kind: RedisCluster, addrs: []string{"h1:7000"}},
		{name: "cluster go-redis form", url: "redis://h1:7000?addr=h2:7001", kind: RedisCluster, addrs: []string{"h1:7000", "h2:7001"}},
		{name: "cluster password file", url: "redis://h1:7000,h2:7001", password: "f", kind: RedisCluster,
			addrs: []string{"h1:7000", "h2:7001"}, pass: "f"},
		{name: "sentinel", url: "redis-sentinel://u:p@s1:26379,s2:26380/mymaster/2", kind: RedisSentinel,
			addrs: []string{"s1:26379", "s2:26380"}, master: "mymaster", db: 2, user: "u", pass: "p"},
		{name: "sentinel tls default db", url: "rediss-sentinel://s1:26379/mymaster", password: "f", kind: RedisSentinel,
			addrs: []string{"s1:26379"}, master: "mymaster", pass: "f", tls: true},
		{name: "sentinel go-redis form", url: "redis://s1:26379?master_name=m&addr=s2:26379", kind: RedisSentinel,
			addrs: []string{"s1:26379", "s2:26379"}, master: "m"},
		{name: "cluster db 1", url: "redis://h1:7000,h2:7001/1", wantErr: ErrRedisURL},
		{name: "sentinel without master", url: "redis-sentinel://s1:26379", wantErr: ErrRedisURL},
		{name: "unknown scheme", url: "redis-ring://h1:7000", wantErr: ErrRedisURL},
		{name: "unknown option", url: "redis://h1:7000,h2:7001?bogus=1", wantErr: ErrRedisURL},
		{name: "two passwords", url: "redis://:a@h1:7000,h2:7001", password: "b", wantErr: ErrRedisPasswordTwice},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Options{RedisURL: tt.url, RedisPassword: tt.password}.RedisTarget()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind() != tt.kind || got.TLS() != tt.tls {
				t.Fatalf("kind %s tls %v, want %s %v", got.Kind(), got.TLS(), tt.kind, tt.tls)
			}
			var addrs []string
			var master, user, pass string
			var db int
			switch tt.kind {
			case RedisSingle:
				addrs, db, user, pass = []string{got.Single.Addr}, got.Single.DB, got.Single.Username, got.Single.Password
			case RedisCluster:
				addrs, user, pass = got.Cluster.Addrs, got.Cluster.Username, got.Cluster.Password
			case RedisSentinel:
				f := got.Failover
				addrs, master, db, user, pass = f.SentinelAddrs, f.MasterName, f.DB, f.Username, f.Password
				if f.SentinelUsername != "" || f.SentinelPassword != "" {
					t.Fatal("the master's credentials were sent to the sentinels")
				}
			}
			if !slices.Equal(addrs, tt.addrs) || master != tt.master || db != tt.db || user != tt.user || pass != tt.pass {
				t.Fatalf("addrs %v master %q db %d user %q pass %q, want %v %q %d %q %q",
					addrs, master, db, user, pass, tt.addrs, tt.master, tt.db, tt.user, tt.pass)
			}
		})
	}
}

// TestCheckRedisNotACluster: cluster seeds that name a plain server fail the start-up check
// with a hint (against the shared test Redis, a single server).
func TestCheckRedisNotACluster(t *testing.T) {
	url := testenv.Redis(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	target, err := Options{RedisURL: "redis-cluster://" + u.Host}.RedisTarget()
	if err != nil {
		t.Fatal(err)
	}
	cl := target.Client(true)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := CheckRedis(ctx, cl, false); err == nil || !strings.Contains(err.Error(), "not a Redis Cluster") {
		t.Fatalf("check: %v, want the not-a-cluster hint", err)
	}
	single, err := Options{RedisURL: url}.RedisTarget()
	if err != nil {
		t.Fatal(err)
	}
	sc := single.Client(true)
	defer sc.Close()
	if err := CheckRedis(ctx, sc, false); err != nil {
		t.Fatalf("check of the single server: %v", err)
	}
}
