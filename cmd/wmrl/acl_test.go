package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/internal/testenv/secure"
	"github.com/wmrl/wmrl/topics"
)

// stageGrant is what one stage's principal may do: the least-privilege ACLs of that stage's
// KafkaUser in the Helm chart and the table in docs/security.md. Topics and the group are literal
// names; transactional ids are a prefix (one id per correction instance).
type stageGrant struct {
	read, write []string
	group       string
	txnPrefix   string
}

// stageGrants is the ACL table under test.
func stageGrants(n topics.Names, groups map[string]string, txnPrefix string) map[string]stageGrant {
	return map[string]stageGrant{
		"generate":   {write: []string{n.Rollouts(), n.Steps()}},
		"worldmodel": {read: []string{n.Rollouts()}, write: []string{n.Predicted(), n.DLQ()}, group: groups["worldmodel"]},
		"sandbox":    {read: []string{n.Rollouts()}, write: []string{n.Executed(), n.DLQ()}, group: groups["sandbox"]},
		"correct": {
			read:  []string{n.Steps(), n.Predicted(), n.Executed(), n.Calibration()},
			write: []string{n.Advantages(), n.Calibration(), n.DLQ()},
			group: groups["correct"], txnPrefix: txnPrefix,
		},
		// digest and train both read the advantages; train also commits offsets in its group.
		"train": {read: []string{n.Advantages()}, group: groups["train"]},
	}
}

// builders turns the grant into CreateACLs requests for principal (User:name).
func (g stageGrant) builders(principal string) []*kadm.ACLBuilder {
	var bs []*kadm.ACLBuilder
	allow := func() *kadm.ACLBuilder { return kadm.NewACLs().Allow(principal).AllowHosts() }
	if len(g.read) > 0 {
		bs = append(bs, allow().Topics(g.read...).Operations(kadm.OpRead, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral))
	}
	if len(g.write) > 0 {
		bs = append(bs, allow().Topics(g.write...).Operations(kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral))
	}
	if g.group != "" {
		bs = append(bs, allow().Groups(g.group).Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	}
	if g.txnPrefix != "" {
		bs = append(bs, allow().TransactionalIDs(g.txnPrefix).Operations(kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternPrefixed))
	}
	return bs
}

// mtlsUser is the CN of the client certificate the secure broker's PKI issues, and so the
// principal (User:wmrl-train) of whoever connects with it to the mTLS listener.
const mtlsUser = "wmrl-train"

// secureEnv is a secure broker and Redis with one SCRAM user per stage holding only its grant.
type secureEnv struct {
	t         *testing.T
	broker    *secure.Broker
	redis     *secure.Redis
	bin       string
	dir       string
	prefix    string
	names     topics.Names
	groups    map[string]string
	txnPrefix string
	passwords map[string]string // user → password
	harnesses []*e2eHarness
}

func newSecureEnv(t *testing.T) *secureEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts its own Kafka broker and redis-server; skipped with -short")
	}
	dir := t.TempDir()
	// The binary builds while the broker starts.
	built := make(chan string, 1)
	go func() { built <- buildWMRLQuiet(dir) }()
	b := secure.StartBroker(t, mtlsUser)
	s := &secureEnv{
		t: t, broker: b, redis: secure.StartRedis(t, b.Certs), dir: dir,
		prefix: "wmrl.acl.", passwords: map[string]string{b.AdminUser: b.AdminPassword},
	}
	s.names = topics.NewNames(s.prefix)
	s.groups = map[string]string{}
	for _, st := range []string{"worldmodel", "sandbox", "correct", "train"} {
		s.groups[st] = s.prefix + st
	}
	s.txnPrefix = s.prefix + "correct-"
	if s.bin = <-built; !strings.HasPrefix(s.bin, "/") {
		t.Fatal(s.bin)
	}
	t.Cleanup(func() {
		for _, h := range s.harnesses {
			h.stopAll()
		}
	})
	return s
}

// buildWMRLQuiet builds the binary (without -race: the secure tests measure behaviour, not data
// races, and a race binary is several times slower to start) and returns its path or an error
// text that does not start with "/".
func buildWMRLQuiet(dir string) string {
	bin := filepath.Join(dir, "wmrl")
	if out, err := execCombined("go", "build", "-o", bin, "."); err != nil {
		return fmt.Sprintf("go build: %v\n%s", err, out)
	}
	return bin
}

// user creates a SCRAM user and returns its name.
func (s *secureEnv) user(name string) string {
	pw := secure.RandomSecret(s.t)
	s.broker.AddUser(s.t, name, pw)
	s.passwords[name] = pw
	return name
}

// as returns a harness whose commands connect as user over SASL_SSL with the test CA, reading
// the SASL and Redis passwords from files (--sasl-password-file, --redis-password-file), as the
// chart does; the Redis URL holds none. TestSecureConnectionFailures passes them as variables.
func (s *secureEnv) as(user string) *e2eHarness {
	h := &e2eHarness{t: s.t, bin: s.bin,
		global: []string{"--brokers", s.broker.SASLSSL, "--topic-prefix", s.prefix,
			"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", user, "--tls-ca", s.broker.Certs.CA,
			"--redis-tls-ca", s.broker.Certs.CA,
			"--sasl-password-file", s.secretFile("sasl-"+user, s.passwords[user]),
			"--redis-password-file", s.secretFile("redis", s.redis.Password)},
		env: []string{"WMRL_REDIS=rediss://" + s.redis.TLS + "/0"},
	}
	s.harnesses = append(s.harnesses, h)
	return h
}

// secretFile writes a credential file readable by its owner only, ending in a newline as one
// written by echo or kubectl does.
func (s *secureEnv) secretFile(name, secret string) string {
	s.t.Helper()
	p := filepath.Join(s.dir, name+".secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// asMTLS returns a harness whose commands connect to the mTLS listener with the client
// certificate (principal User:<mtlsUser>), without SASL.
func (s *secureEnv) asMTLS() *e2eHarness {
	c := s.broker.Certs
	h := &e2eHarness{t: s.t, bin: s.bin,
		global: []string{"--brokers", s.broker.MTLS, "--topic-prefix", s.prefix,
			"--tls-ca", c.CA, "--tls-cert", c.Client, "--tls-key", c.ClientKey},
	}
	s.harnesses = append(s.harnesses, h)
	return h
}

// clientAs returns a franz-go client for user on the SASL_SSL listener.
func (s *secureEnv) clientAs(user string, extra ...kgo.Opt) *kgo.Client {
	s.t.Helper()
	opts := append([]kgo.Opt{kgo.SeedBrokers(s.broker.SASLSSL),
		kgo.SASL(scram.Auth{User: user, Pass: s.passwords[user]}.AsSha512Mechanism()),
		kgo.DialTLSConfig(s.broker.Certs.TLS(s.broker.Certs.CA, false)),
		kgo.RequestRetries(2), kgo.RetryTimeout(10 * time.Second)}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(cl.Close)
	return cl
}

// secrets are every password the test made; none may appear in any output.
func (s *secureEnv) secrets() []string {
	out := []string{s.redis.Password}
	for _, pw := range s.passwords {
		out = append(out, pw)
	}
	return out
}

// checkNoSecrets fails when a password shows up in text (a stage's log, an error, --help).
func (s *secureEnv) checkNoSecrets(what, text string) {
	s.t.Helper()
	for _, pw := range s.secrets() {
		if strings.Contains(text, pw) {
			s.t.Errorf("%s contains a password:\n%s", what, text)
		}
	}
}

// TestSecureStagesLeastPrivilege runs the whole pipeline — every stage a process with its own
// SCRAM-SHA-512 user over SASL_SSL (the trainer with a client certificate over mutual TLS),
// holding only the ACLs of stageGrants, Redis over rediss:// with a password — against a broker with StandardAuthorizer and no allow-everyone fallback,
// then checks that the ACLs are what stops a principal from forging another run's executed
// rewards, reading what it was not granted, or taking over the correction's group and
// transactional id.
func TestSecureStagesLeastPrivilege(t *testing.T) {
	s := newSecureEnv(t)
	grants := stageGrants(s.names, s.groups, s.txnPrefix)
	stages := make([]string, 0, len(grants))
	for st := range grants {
		stages = append(stages, st)
	}
	sort.Strings(stages)
	h := map[string]*e2eHarness{}
	for _, st := range stages {
		u := s.user("wmrl-" + st)
		for _, b := range grants[st].builders("User:" + u) {
			s.broker.Grant(t, b)
		}
		h[st] = s.as(u)
	}
	// The trainer proves mutual TLS: its principal comes from its certificate, not SASL.
	h["train"] = s.asMTLS()
	tenant := s.user("tenant") // authenticated, but granted nothing
	admin := s.as(s.broker.AdminUser)

	admin.run(time.Minute, 0, "topics", "create", "--partitions", "2")

	rollouts := e2eWorkload(t)
	input := filepath.Join(s.dir, "rollouts.jsonl")
	writeE2EInput(t, input, rollouts)
	h["generate"].run(2*time.Minute, 0, "generate", "--backend", "jsonl", "--input", input,
		"--run", e2eRun, "--anchor-fraction", strconv.FormatFloat(e2eAnchor, 'g', -1, 64))

	wm := startE2EWorldModel(t)
	argv := e2eScoreArgv(t)
	procs := []*e2eProc{
		h["worldmodel"].start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", wm+"/v1",
			"--model", "m", "--concurrency", "4", "--group", s.groups["worldmodel"], "--metrics-addr", "127.0.0.1:0"),
		h["sandbox"].start("sandbox", "sandbox", "--single-step-no-private", "--argv", argv, "--slots", "2", "--timeout", "5s",
			"--group", s.groups["sandbox"], "--metrics-addr", "127.0.0.1:0"),
		h["correct"].start("correct", "correct", "--transactional-id", s.txnPrefix+"0",
			"--group", s.groups["correct"], "--redis-prefix", "acl", "--metrics-addr", "127.0.0.1:0"),
	}
	live := h["train"].pollDigest(2 * time.Minute)
	trainOut := h["train"].run(time.Minute, 0, "train", "--run", e2eRun, "--max-steps", strconv.Itoa(e2eSteps), "--group", s.groups["train"])
	checkTrainOutput(t, trainOut, e2eRollouts*e2eGroups)

	// The forgeries and trespasses, while the stages still run.
	s.checkDenied(t, tenant)

	for _, p := range procs {
		p.terminate(30 * time.Second)
	}
	for _, p := range procs {
		s.checkNoSecrets("wmrl "+p.name+" output", p.stderr.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := s.broker.AdminOpts()
	checkPredicted(t, readCommitted(ctx, t, opts, s.names.Predicted()), rollouts)
	checkExecuted(t, readCommitted(ctx, t, opts, s.names.Executed()), rollouts)
	checkAdvantageTopic(ctx, t, opts, s.names.Advantages(), rollouts, live, e2eSteps)
}

// checkDenied tries what the ACLs must refuse and requires the broker's authorization error for
// each, and that the refused forgery left no record behind.
func (s *secureEnv) checkDenied(t *testing.T, tenant string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := s.broker.Admin(t)
	before, err := adm.ListEndOffsets(ctx, s.names.Executed())
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	score := 1.0
	forged, err := topics.EncodeExecuted(topics.ExecutedReward{
		RolloutRef: topics.RolloutRef{RunID: e2eRun, Step: e2eSteps, GroupID: "forged", RolloutID: "forged-0", Stream: "default", PolicyVersion: "ckpt-x"},
		Score:      &score,
		Status:     topics.StatusOK,
		CreatedAt:  time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	produce := func(user, topic string, value []byte, extra ...kgo.Opt) error {
		cl := s.clientAs(user, extra...)
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Key: []byte(e2eRun), Value: value}).FirstErr()
	}
	fetch := func(user, topic string, extra ...kgo.Opt) error {
		cl := s.clientAs(user, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, extra...)...)
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for {
			fs := cl.PollFetches(pctx)
			if err := fs.Err0(); err != nil {
				return err
			}
			if fs.NumRecords() > 0 {
				return nil
			}
		}
	}
	cases := []struct {
		name string
		want error
		try  func() error
	}{
		{"the world model forges an executed reward", kerr.TopicAuthorizationFailed,
			func() error { return produce("wmrl-worldmodel", s.names.Executed(), forged) }},
		{"a tenant forges an executed reward", kerr.TopicAuthorizationFailed,
			func() error { return produce(tenant, s.names.Executed(), forged) }},
		// Without idempotence, so the answer is the topic's ACL and not the missing idempotent-write
		// right (CLUSTER_AUTHORIZATION_FAILED) that already stops a default producer.
		{"the trainer writes advantages", kerr.TopicAuthorizationFailed,
			func() error {
				return produce("wmrl-train", s.names.Advantages(), []byte("x"), kgo.DisableIdempotentWrite())
			}},
		{"a tenant reads the advantages", kerr.TopicAuthorizationFailed,
			func() error { return fetch(tenant, s.names.Advantages()) }},
		{"the generator reads rollouts", kerr.TopicAuthorizationFailed,
			func() error { return fetch("wmrl-generate", s.names.Rollouts()) }},
		{"the sandbox joins the correction's group", kerr.GroupAuthorizationFailed,
			func() error {
				return fetch("wmrl-sandbox", s.names.Rollouts(), kgo.ConsumerGroup(s.groups["correct"]))
			}},
		{"a tenant fences the correction's transactional id", kerr.TransactionalIDAuthorizationFailed,
			func() error {
				req := kmsg.NewPtrInitProducerIDRequest()
				id := s.txnPrefix + "0"
				req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &id, 60000, -1, -1
				cl := s.clientAs(tenant)
				defer cl.Close()
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return err
				}
				return kerr.ErrorForCode(resp.ErrorCode)
			}},
	}
	for _, c := range cases {
		err := c.try()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		} else {
			t.Logf("%s: refused (%v)", c.name, err)
		}
	}
	after, err := adm.ListEndOffsets(ctx, s.names.Executed())
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	before.Each(func(o kadm.ListedOffset) {
		if a, ok := after.Lookup(o.Topic, o.Partition); !ok || a.Offset != o.Offset {
			t.Errorf("%s/%d end offset %d before the forgery attempts, %d after", o.Topic, o.Partition, o.Offset, a.Offset)
		}
	})
}

// startE2EWorldModel serves e2eWorldModel until the test ends and returns its base URL.
func startE2EWorldModel(t *testing.T) string {
	var requests atomic.Int64
	srv := httptest.NewServer(testenv.WorldModel(&requests))
	t.Cleanup(srv.Close)
	return srv.URL
}

func execCombined(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
