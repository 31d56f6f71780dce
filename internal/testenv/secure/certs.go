package secure

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Certs is a throwaway PKI made with openssl at test time: a CA that signs the server and the
// client certificate, and a second, unrelated CA for the wrong-CA cases. Every file is PEM;
// keys are unencrypted PKCS#8, which both Kafka's PEM key store and Go's crypto/tls read.
type Certs struct {
	Dir string
	// CA signs Server and Client.
	CA, CAKey string
	// Server is valid for localhost and 127.0.0.1 (ServerNames).
	Server, ServerKey string
	// ServerBundle is ServerKey followed by Server, the layout of Kafka's PEM key store.
	ServerBundle string
	// Client is a client certificate with subject CN=<ClientCN>, for mutual TLS.
	Client, ClientKey string
	ClientCN          string
	// OtherCA is a CA that signed nothing here.
	OtherCA string
}

// ServerNames are the names the server certificate is valid for.
var ServerNames = []string{"localhost", "127.0.0.1"}

// NewCerts writes a fresh PKI into dir. clientCN names the client certificate's subject (and so
// the Kafka principal of an mTLS client, see Broker).
func NewCerts(t testing.TB, dir, clientCN string) *Certs {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("secure: openssl not found (Debian: apt-get install -y openssl): %v", err)
	}
	c := &Certs{
		Dir: dir, ClientCN: clientCN,
		CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		Server: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ServerBundle: filepath.Join(dir, "server-bundle.pem"),
		Client:       filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		OtherCA: filepath.Join(dir, "other-ca.pem"),
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("openssl", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("secure: openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	newCA := func(cert, key, cn string) {
		run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN="+cn,
			"-keyout", key, "-out", cert,
			"-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
	}
	newCA(c.CA, c.CAKey, "wmrl test CA")
	newCA(c.OtherCA, filepath.Join(dir, "other-ca-key.pem"), "wmrl unrelated CA")

	sign := func(cert, key, cn, ext string) {
		csr := cert + ".csr"
		extFile := cert + ".ext"
		if err := os.WriteFile(extFile, []byte(ext), 0o600); err != nil {
			t.Fatal(err)
		}
		run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN="+cn, "-keyout", key, "-out", csr)
		run("x509", "-req", "-in", csr, "-CA", c.CA, "-CAkey", c.CAKey, "-CAcreateserial",
			"-days", "2", "-out", cert, "-extfile", extFile)
	}
	var san []string
	for _, n := range ServerNames {
		if strings.Trim(n, "0123456789.") == "" {
			san = append(san, "IP:"+n)
		} else {
			san = append(san, "DNS:"+n)
		}
	}
	sign(c.Server, c.ServerKey, "localhost",
		"subjectAltName="+strings.Join(san, ",")+"\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
	sign(c.Client, c.ClientKey, clientCN, "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")

	key, err := os.ReadFile(c.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(c.Server)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ServerBundle, append(append(key, '\n'), cert...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{c.CAKey, c.ServerKey, c.ClientKey} {
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(fmt.Errorf("secure: %w", err))
		}
	}
	return c
}

// TLS returns a client configuration that trusts the CA in caFile and, when withClient is
// true, presents the client certificate.
func (c *Certs) TLS(caFile string, withClient bool) *tls.Config {
	pool := x509.NewCertPool()
	if pem, err := os.ReadFile(caFile); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if withClient {
		if cert, err := tls.LoadX509KeyPair(c.Client, c.ClientKey); err == nil {
			tc.Certificates = []tls.Certificate{cert}
		}
	}
	return tc
}
