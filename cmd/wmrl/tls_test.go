package main

import (
	"strings"
	"testing"
	"time"
)

// TestSecureConnectionFailures: a wrong password, a wrong CA, a wrong server name and plaintext
// against a TLS listener each end a command — one-shot or long-running stage — within seconds
// with a message that names the cause and the option to fix, for Kafka and for Redis, and no
// output repeats a password.
func TestSecureConnectionFailures(t *testing.T) {
	s := newSecureEnv(t)
	b, c, r := s.broker, s.broker.Certs, s.redis
	pw := "WMRL_SASL_PASSWORD=" + s.passwords[s.user("someone")]
	scram := []string{"--topic-prefix", s.prefix, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "someone"}
	kafkaCases := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"wrong password", append([]string{"--brokers", b.SASLSSL, "--tls-ca", c.CA}, scram...),
			"WMRL_SASL_PASSWORD=not-the-password", "authentication failed: check --sasl-user, the password"},
		{"wrong CA", append([]string{"--brokers", b.SASLSSL, "--tls-ca", c.OtherCA}, scram...),
			pw, "not signed by a CA in --tls-ca"},
		{"wrong server name", append([]string{"--brokers", b.SASLSSL, "--tls-ca", c.CA, "--tls-server-name", "kafka.example.com"}, scram...),
			pw, "set --tls-server-name"},
		{"plaintext against TLS", append([]string{"--brokers", b.SASLSSL}, scram...),
			pw, "add --tls"},
		{"mTLS without a client certificate", []string{"--brokers", b.MTLS, "--topic-prefix", s.prefix, "--tls-ca", c.CA},
			"", "set --tls-cert and --tls-key"},
	}
	sandboxArgv := `["/bin/true"]`
	commands := [][]string{
		{"topics", "check", "--partitions", "2"},
		{"worldmodel", "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--metrics-addr", "127.0.0.1:0"},
		{"sandbox", "--single-step-no-private", "--argv", sandboxArgv, "--metrics-addr", "127.0.0.1:0"},
		{"correct", "--metrics-addr", "127.0.0.1:0", "--redis", r.URL()},
		{"train", "--run", "r"},
		{"digest", "--run", "r"},
	}
	for _, tc := range kafkaCases {
		for _, cmd := range commands {
			t.Run(tc.name+"/"+cmd[0], func(t *testing.T) {
				s.expectFailure(t, tc.args, tc.env, cmd, tc.want)
			})
		}
	}

	// Redis: the correction stage with good Kafka credentials and a bad Redis setting.
	admin := []string{"--brokers", b.SASLSSL, "--tls-ca", c.CA, "--topic-prefix", s.prefix,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", b.AdminUser}
	adminPW := "WMRL_SASL_PASSWORD=" + b.AdminPassword
	wrongPW := strings.Replace(r.URL(), r.Password, "not-the-password", 1)
	redisCases := []struct {
		name  string
		url   string
		extra []string
		want  string
	}{
		{"wrong password", wrongPW, nil, "authentication failed: check the user and password"},
		{"no password", "redis://" + r.Plain + "/0", nil, "requires a password"},
		{"wrong CA", r.TLSURL(), []string{"--redis-tls-ca", c.OtherCA}, "not signed by a CA in --redis-tls-ca"},
		{"system roots only", r.TLSURL(), nil, "not signed by a CA in --redis-tls-ca"},
		{"plaintext against TLS", strings.Replace(strings.Replace(r.TLSURL(), "rediss://", "redis://", 1), r.TLS, r.TLS, 1), nil, "use rediss://"},
		{"TLS against plaintext", strings.Replace(r.URL(), "redis://", "rediss://", 1), []string{"--redis-tls-ca", c.CA}, "use redis://"},
	}
	for _, tc := range redisCases {
		t.Run("redis "+tc.name, func(t *testing.T) {
			args := append(append([]string(nil), admin...), tc.extra...)
			s.expectFailure(t, args, adminPW+"\x00WMRL_REDIS="+tc.url, []string{"correct", "--metrics-addr", "127.0.0.1:0"}, tc.want)
		})
	}
}

// expectFailure runs one command and requires a non-zero exit within 15 s whose stderr contains
// want and no password. env holds NUL-separated VAR=value entries.
func (s *secureEnv) expectFailure(t *testing.T, global []string, env string, cmd []string, want string) {
	t.Helper()
	h := &e2eHarness{t: t, bin: s.bin, global: global}
	if env != "" {
		h.env = strings.Split(env, "\x00")
	}
	start := time.Now()
	_, errOut, code := h.try(30*time.Second, cmd...)
	took := time.Since(start)
	t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), lastLine(errOut))
	if code == 0 {
		t.Fatalf("%s succeeded", cmd[0])
	}
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr does not name the cause (%q):\n%s", want, errOut)
	}
	if took > 15*time.Second {
		t.Errorf("took %v to fail", took)
	}
	s.checkNoSecrets("stderr", errOut)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSecureDemoExternal runs `wmrl demo --external` against the SASL_SSL broker (as the admin,
// since the demo creates its topics) with Redis over a password-protected plain port, and checks
// that neither its output nor --help shows a password given by flag or environment.
func TestSecureDemoExternal(t *testing.T) {
	s := newSecureEnv(t)
	b := s.broker
	h := &e2eHarness{t: t, bin: s.bin,
		global: []string{"--brokers", b.SASLSSL, "--tls-ca", b.Certs.CA, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", b.AdminUser},
		env:    []string{"WMRL_SASL_PASSWORD=" + b.AdminPassword, "WMRL_REDIS=" + s.redis.URL()},
	}
	start := time.Now()
	out, errOut, code := h.try(4*time.Minute, "demo", "--external", "--quick", "--steps", "4", "--groups", "4",
		"--eval-problems", "1", "--out", "")
	if code != 0 {
		t.Fatalf("demo --external: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("demo --external took %v; last line: %s", time.Since(start).Round(time.Millisecond), lastLine(out))
	if !strings.Contains(out, "wmrl demo: Kafka "+b.SASLSSL) || !strings.Contains(out, "Redis redis://***@") {
		t.Errorf("demo does not report the external cluster with a redacted Redis URL:\n%s", out)
	}
	if !strings.Contains(out, "speedup-to-target") && !strings.Contains(out, "final score") {
		t.Errorf("demo printed no result:\n%s", out)
	}
	s.checkNoSecrets("demo output", out+errOut)

	// --help with the secrets set every way a user can set them.
	for _, args := range [][]string{{"topics", "check", "--help"}, {"correct", "--help"}, {"demo", "--help"},
		{"correct", "--help", "--sasl-password", b.AdminPassword, "--redis", s.redis.URL()}} {
		out, errOut, _ := h.try(30*time.Second, args...)
		if !strings.Contains(out+errOut, "--sasl-password") {
			t.Errorf("wmrl %s printed no flag list:\n%s", strings.Join(args, " "), out+errOut)
		}
		s.checkNoSecrets("wmrl "+strings.Join(args, " "), out+errOut)
	}
}
