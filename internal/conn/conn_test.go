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
		{name: "unknown sasl", opts: Options{Brokers: []string{"a:9092"}, SASLMechanism: "GSSAPI", SASLUser: "u"}, wantErr: `"GSSAPI"`},
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
