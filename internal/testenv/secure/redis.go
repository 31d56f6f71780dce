package secure

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a running redis-server that requires a password on a plain port and on a TLS port.
type Redis struct {
	// Password is the default user's password (requirepass).
	Password string
	// Plain is host:port of the password-only listener; TLS of the TLS listener, whose
	// certificate is Certs.Server (clients need no certificate of their own).
	Plain, TLS string
	// Certs is the PKI the TLS listener uses.
	Certs *Certs
}

// URL returns a redis:// URL with the password for the plain listener.
func (r *Redis) URL() string { return fmt.Sprintf("redis://:%s@%s/0", r.Password, r.Plain) }

// TLSURL returns a rediss:// URL with the password for the TLS listener.
func (r *Redis) TLSURL() string { return fmt.Sprintf("rediss://:%s@%s/0", r.Password, r.TLS) }

// StartRedis launches redis-server with the certificates (NewCerts) and a fresh password,
// stopped when the test ends.
func StartRedis(t testing.TB, certs *Certs) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("secure: redis-server not found (Debian: apt-get install -y redis-server): %v", err)
	}
	ports := freePorts(t, 2)
	r := &Redis{
		Password: RandomSecret(t), Certs: certs,
		Plain: fmt.Sprintf("127.0.0.1:%d", ports[0]), TLS: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	dir := t.TempDir()
	// The password goes in a config file, not argv, where ps would show it.
	conf := filepath.Join(dir, "redis.conf")
	writeFile(t, conf, fmt.Sprintf(`bind 127.0.0.1
port %d
tls-port %d
tls-cert-file %s
tls-key-file %s
tls-ca-cert-file %s
tls-auth-clients no
requirepass %s
save ""
appendonly no
dir %s
logfile %s
`, ports[0], ports[1], certs.Server, certs.ServerKey, certs.CA, r.Password, dir, filepath.Join(dir, "redis.log")))
	cmd := exec.Command("redis-server", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("secure: start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = out.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(opts)
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cl.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("secure: redis-server exited: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("secure: redis-server not answering PING: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
