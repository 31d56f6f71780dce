package conn

import (
	"errors"
	"slices"
	"testing"
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
