package conn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKafkaOpts(t *testing.T) {
	dir := t.TempDir()
	badCA := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(badCA, []byte("not a pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
		wantN   int
	}{
		{name: "no brokers", opts: Options{}, wantErr: "no Kafka brokers"},
		{name: "blank brokers", opts: Options{Brokers: []string{" , "}}, wantErr: "no Kafka brokers"},
		{name: "plain", opts: Options{Brokers: []string{"a:9092,b:9092"}}, wantN: 1},
		{name: "client id", opts: Options{Brokers: []string{"a:9092"}, ClientID: "x"}, wantN: 2},
		{name: "scram", opts: Options{Brokers: []string{"a:9092"}, SASLMechanism: "scram-sha-512", SASLUser: "u", SASLPassword: "p"}, wantN: 2},
		{name: "sasl without user", opts: Options{Brokers: []string{"a:9092"}, SASLMechanism: "PLAIN"}, wantErr: "needs --sasl-user"},
		{name: "unknown sasl", opts: Options{Brokers: []string{"a:9092"}, SASLMechanism: "GSSAPI", SASLUser: "u"}, wantErr: "GSSAPI is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{name: "unknown sasl without user", opts: Options{Brokers: []string{"a:9092"}, SASLMechanism: "GSSAPI"}, wantErr: "GSSAPI is not supported"},
		{name: "tls on", opts: Options{Brokers: []string{"a:9092"}, TLS: true}, wantN: 2},
		{name: "bad ca", opts: Options{Brokers: []string{"a:9092"}, TLSCA: badCA}, wantErr: "no PEM certificates"},
		{name: "missing ca", opts: Options{Brokers: []string{"a:9092"}, TLSCA: filepath.Join(dir, "nope.pem")}, wantErr: "tls-ca"},
		{name: "cert without key", opts: Options{Brokers: []string{"a:9092"}, TLSCert: "c.pem"}, wantErr: "together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opts.KafkaOpts()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.wantN {
				t.Fatalf("got %d opts, want %d", len(got), tt.wantN)
			}
		})
	}
	if _, err := (Options{}).KafkaOpts(); !errors.Is(err, ErrNoBrokers) {
		t.Fatalf("want ErrNoBrokers, got %v", err)
	}
}

func TestRedisOptions(t *testing.T) {
	ro, err := Options{RedisURL: "rediss://user:secret@example:6380/3"}.RedisOptions()
	if err != nil {
		t.Fatal(err)
	}
	if ro.Addr != "example:6380" || ro.Password != "secret" || ro.Username != "user" || ro.DB != 3 || ro.TLSConfig == nil {
		t.Fatalf("parsed %+v", ro)
	}
	if _, err := (Options{}).RedisOptions(); err == nil {
		t.Fatal("empty URL accepted")
	}
	if _, err := (Options{RedisURL: "http://x"}).RedisOptions(); err == nil {
		t.Fatal("http scheme accepted")
	}
}

func TestRedisOptionsTLSFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "ca needs rediss", opts: Options{RedisURL: "redis://:pw@h:6379/0", RedisTLSCA: notPEM}, wantErr: "is not rediss://"},
		{name: "ca not pem", opts: Options{RedisURL: "rediss://h:6380/0", RedisTLSCA: notPEM}, wantErr: "redis-tls-ca " + notPEM + ": no PEM certificates"},
		{name: "ca missing", opts: Options{RedisURL: "rediss://h:6380/0", RedisTLSCA: filepath.Join(dir, "nope.pem")}, wantErr: "redis-tls-ca:"},
		{name: "cert without key", opts: Options{RedisURL: "rediss://h:6380/0", RedisTLSCert: "c.pem"}, wantErr: "redis-tls-cert and redis-tls-key must be given together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.opts.RedisOptions()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Fatalf("error %q repeats the password", err)
			}
		})
	}
}

// A URL that does not parse must not come back in the error: it may hold a password.
func TestRedisOptionsErrorHidesPassword(t *testing.T) {
	for _, u := range []string{"redis://:s3cret@host:port/0", "rediss://user:s3cret@host:6379/x", "redis://user:s3cret@host:6379/0?dial_timeout=soon"} {
		_, err := Options{RedisURL: u}.RedisOptions()
		if err == nil {
			t.Fatalf("%s accepted", u)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q repeats the password", err)
		}
		if !strings.Contains(err.Error(), "***@host") {
			t.Errorf("error %q does not name the (redacted) URL", err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:6379/0":       "redis://***@h:6379/0",
		"rediss://u:p@ss@h:6380":     "rediss://***@h:6380",
		"redis://h:6379/0":           "redis://h:6379/0",
		"not a url @ all":            "not a url @ all",
		"http://user@x/#frag@anchor": "http://***@anchor",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
