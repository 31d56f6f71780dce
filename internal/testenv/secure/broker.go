// Package secure starts throwaway Apache Kafka brokers and redis-servers that demand
// authentication and encryption, for the integration tests of ACLs, SASL_SSL and mutual TLS.
// Everything is real: the broker is Kafka from the Maven Central jars deploy/local/kafka.sh
// fetches (run with java), the Redis is Debian's redis-server, and the certificates are made
// with openssl when the test starts. The shared unauthenticated services of internal/testenv
// are left alone.
//
// A Broker is one combined KRaft node with StandardAuthorizer and these listeners, all on
// 127.0.0.1 and free ports:
//
//	SASL_SSL     SCRAM-SHA-512 over TLS (the server certificate is for localhost, 127.0.0.1)
//	SSL          mutual TLS: a client certificate signed by the test CA is required, and the
//	             principal is its CN (ssl.principal.mapping.rules)
//	INTERNAL     SASL_PLAINTEXT for the broker's own traffic (the admin user)
//	CONTROLLER   PLAINTEXT, KRaft only
//
// allow.everyone.if.no.acl.found is false, so a principal without an ACL can do nothing;
// the admin user (and the controller listener's ANONYMOUS) are super users.
package secure

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/testenv/kafkaprobe"
)

// Broker is a running secure broker. Its fields are what a client needs to reach it.
type Broker struct {
	// SASLSSL is host:port of the SASL_SSL (SCRAM-SHA-512) listener.
	SASLSSL string
	// MTLS is host:port of the SSL listener that requires a client certificate.
	MTLS string
	// Certs holds the CA, server and client certificates.
	Certs *Certs
	// AdminUser and AdminPassword are the super user's SCRAM-SHA-512 credentials.
	AdminUser, AdminPassword string

	dir string
	cmd *exec.Cmd
}

// StartBroker launches a broker in a temporary directory and waits until it commits a transaction;
// it is stopped when the test ends. mtlsCN is the CN of the client certificate made for the
// mTLS listener (and so that client's principal, User:<mtlsCN>).
func StartBroker(t testing.TB, mtlsCN string) *Broker {
	t.Helper()
	lib := jars(t)
	dir := t.TempDir()
	certs := NewCerts(t, filepath.Join(mkdir(t, dir, "certs")), mtlsCN)
	ports := freePorts(t, 4)
	b := &Broker{
		SASLSSL: fmt.Sprintf("127.0.0.1:%d", ports[0]), MTLS: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		Certs: certs, AdminUser: "admin", AdminPassword: RandomSecret(t), dir: dir,
	}
	internal := fmt.Sprintf("127.0.0.1:%d", ports[2])
	controller := fmt.Sprintf("127.0.0.1:%d", ports[3])
	data := mkdir(t, dir, "data")
	logs := mkdir(t, dir, "logs")
	serverProps := filepath.Join(dir, "server.properties")
	writeFile(t, serverProps, strings.Join(b.serverProperties(internal, controller, data), "\n")+"\n")
	log4j := filepath.Join(dir, "log4j2.properties")
	writeFile(t, log4j, fmt.Sprintf(`status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
`, filepath.Join(logs, "server.log")))

	cp := filepath.Join(lib, "*")
	quiet := "-Dlog4j2.configurationFile=" + log4j + ".tools"
	writeFile(t, log4j+".tools", "status = warn\nrootLogger.level = ERROR\n")
	id := strings.TrimSpace(java(t, cp, quiet, "kafka.tools.StorageTool", "random-uuid"))
	java(t, cp, quiet, "kafka.tools.StorageTool", "format", "-t", id, "-c", serverProps,
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", b.AdminUser, b.AdminPassword))

	b.cmd = exec.Command("java", "-Xms128m", "-Xmx384m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile="+log4j, "-Dkafka.logs.dir="+logs,
		"-cp", cp, "kafka.Kafka", serverProps)
	stdout, err := os.Create(filepath.Join(logs, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stdout, b.cmd.Stderr = stdout, stdout
	// The broker dies with the test binary even when the test is killed mid-run.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("secure: start java: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); _ = stdout.Close(); close(exited) }()
	t.Cleanup(func() { b.stop(t, exited) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.waitReady(ctx, exited); err != nil {
		t.Fatalf("secure: broker not ready after %v: %v\n%s", time.Since(start).Round(time.Millisecond), err, b.LogTail(40))
	}
	t.Logf("secure: broker ready in %v (SASL_SSL %s, mTLS %s)", time.Since(start).Round(time.Millisecond), b.SASLSSL, b.MTLS)
	return b
}

// serverProperties is the broker's server.properties (one line each): the four listeners with
// internal and controller as the INTERNAL and CONTROLLER addresses, SCRAM and TLS, the
// authorizer that denies what no ACL allows, and single-node replication; data is log.dirs.
func (b *Broker) serverProperties(internal, controller, data string) []string {
	jaas := func(extra string) string {
		return "org.apache.kafka.common.security.scram.ScramLoginModule required" + extra + ";"
	}
	return []string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@" + controller,
		fmt.Sprintf("listeners=SASL_SSL://%s,SSL://%s,INTERNAL://%s,CONTROLLER://%s", b.SASLSSL, b.MTLS, internal, controller),
		fmt.Sprintf("advertised.listeners=SASL_SSL://%s,SSL://%s,INTERNAL://%s", b.SASLSSL, b.MTLS, internal),
		"listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=INTERNAL",
		"sasl.enabled.mechanisms=SCRAM-SHA-512",
		"sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
		"listener.name.internal.scram-sha-512.sasl.jaas.config=" +
			jaas(fmt.Sprintf(` username="%s" password="%s"`, b.AdminUser, b.AdminPassword)),
		"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=" + jaas(""),
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + b.Certs.ServerBundle,
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + b.Certs.CA,
		"listener.name.ssl.ssl.client.auth=required",
		`ssl.principal.mapping.rules=RULE:^CN=([^,]+).*$/$1/,DEFAULT`,
		"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"allow.everyone.if.no.acl.found=false",
		"super.users=User:" + b.AdminUser + ";User:ANONYMOUS",
		"log.dirs=" + data,
		"num.partitions=1",
		"default.replication.factor=1",
		"min.insync.replicas=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"auto.create.topics.enable=false",
	}
}

func (b *Broker) waitReady(ctx context.Context, exited <-chan struct{}) error {
	var last error
	for {
		select {
		case <-exited:
			return errors.New("broker process exited")
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		last = kafkaprobe.CommitTransactional(pctx, []string{b.SASLSSL}, "wmrl.__ready", b.adminAuth()...)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (b *Broker) stop(t testing.TB, exited <-chan struct{}) {
	if t.Failed() {
		t.Logf("secure: broker log tail:\n%s", b.LogTail(60))
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
	}
}

// LogTail returns the last n lines of the broker's server.log.
func (b *Broker) LogTail(n int) string {
	raw, err := os.ReadFile(filepath.Join(b.dir, "logs", "server.log"))
	if err != nil {
		return fmt.Sprintf("(no broker log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (b *Broker) adminAuth() []kgo.Opt {
	return []kgo.Opt{
		kgo.SASL(scram.Auth{User: b.AdminUser, Pass: b.AdminPassword}.AsSha512Mechanism()),
		kgo.DialTLSConfig(b.Certs.TLS(b.Certs.CA, false)),
	}
}

// AdminOpts are client options for the super user on the SASL_SSL listener.
func (b *Broker) AdminOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(b.SASLSSL)}, b.adminAuth()...)
}

// Admin returns an admin client for the super user, closed when the test ends.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(b.AdminOpts()...)
	if err != nil {
		t.Fatalf("secure: admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// AddUser creates a SCRAM-SHA-512 user.
func (b *Broker) AddUser(t testing.TB, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.Admin(t).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password,
	}})
	if err == nil {
		res.EachError(func(r kadm.AlteredUserSCRAM) {
			err = errors.Join(err, fmt.Errorf("%s: %w %s", r.User, r.Err, r.ErrMessage))
		})
	}
	if err != nil {
		t.Fatalf("secure: add SCRAM user %s: %v", user, err)
	}
}

// Grant creates the ACLs the builder describes and fails the test on any refusal.
func (b *Broker) Grant(t testing.TB, acls *kadm.ACLBuilder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.Admin(t).CreateACLs(ctx, acls)
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = errors.Join(err, fmt.Errorf("%s %s %s %s: %w %s", r.Principal, r.Operation, r.Type, r.Name, r.Err, r.ErrMessage))
			}
		}
	}
	if err != nil {
		t.Fatalf("secure: create ACLs: %v", err)
	}
}

// RandomSecret returns a fresh password.
func RandomSecret(t testing.TB) string {
	t.Helper()
	p := make([]byte, 12)
	if _, err := rand.Read(p); err != nil {
		t.Fatal(err)
	}
	return "pw-" + hex.EncodeToString(p)
}

// jars returns the directory of the broker jars, fetching them with deploy/local/kafka.sh when
// the cache lacks them (the same cache and version variables as that script).
func jars(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatalf("secure: java not found; Kafka 4.x needs Java 17+ (Debian: apt-get install -y openjdk-17-jre-headless)")
	}
	cache := os.Getenv("WMRL_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "wmrl")
	}
	version := os.Getenv("WMRL_KAFKA_VERSION")
	version = cmp.Or(version, "4.4.0")
	lib := filepath.Join(cache, "kafka-"+version, "lib")
	if _, err := os.Stat(filepath.Join(lib, ".complete")); err == nil {
		return lib
	}
	cmd := exec.Command("bash", filepath.Join(testenv.RepoRoot(t), "deploy", "local", "kafka.sh"), "fetch")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secure: kafka.sh fetch: %v\n%s", err, out)
	}
	return lib
}

func java(t testing.TB, args ...string) string {
	t.Helper()
	full := append([]string{"-cp"}, args...)
	out, err := exec.Command("java", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("secure: java %s: %v\n%s", strings.Join(args[1:], " "), err, out)
	}
	return string(out)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func mkdir(t testing.TB, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
