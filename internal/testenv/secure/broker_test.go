package secure

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestStartRedis(t *testing.T) {
	r := StartRedis(t, NewCerts(t, t.TempDir(), "c"))
	opts, err := redis.ParseURL(r.TLSURL())
	if err != nil {
		t.Fatal(err)
	}
	opts.TLSConfig = r.Certs.TLS(r.Certs.CA, false)
	cl := redis.NewClient(opts)
	defer cl.Close()
	if err := cl.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}
