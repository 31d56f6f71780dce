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
		// The generator writes steps but may not end runs: no run-control topic.
		"generate":   {write: []string{n.Rollouts(), n.Steps()}},
		"worldmodel": {read: []string{n.Rollouts()}, write: []string{n.Predicted(), n.DLQ()}, group: groups["worldmodel"]},
		"sandbox":    {read: []string{n.Rollouts()}, write: []string{n.Executed(), n.DLQ()}, group: groups["sandbox"]},
		"correct": {
			// Steps: relayed end requests and idle ends, in its transactions.
			read:  []string{n.Steps(), n.Runs(), n.Predicted(), n.Executed(), n.Calibration()},
			write: []string{n.Steps(), n.Advantages(), n.Calibration(), n.DLQ()},
			group: groups["correct"], txnPrefix: txnPrefix,
		},
		// digest and train both read the advantages; train also commits offsets in its group. The
		// trainer ends its runs: Write on the run-control topic.
		"train": {read: []string{n.Advantages()}, write: []string{n.Runs()}, group: groups["train"]},
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
	// The generator may not end the run (no Write on the run-control topic): the trainer does.
	h["generate"].run(2*time.Minute, 0, "generate", "--backend", "jsonl", "--input", input,
		"--run", e2eRun, "--anchor-fraction", strconv.FormatFloat(e2eAnchor, 'g', -1, 64), "--end-run=false")

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
	s.checkRunEnds(t, h)

	for _, p := range procs {
		p.terminate(30 * time.Second)
	}
	for _, p := range procs {
		s.checkNoSecrets("wmrl "+p.name+" output", p.stderr.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := s.broker.AdminOpts()
	checkPredicted(t, readCommittedRecords(ctx, t, opts, s.names.Predicted()), rollouts)
	checkExecuted(t, readCommittedRecords(ctx, t, opts, s.names.Executed()), rollouts)
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

// checkRunEnds tries to end the sealed run e2eRun as each principal (docs/security.md, "Who may end
// a run"): the generator is refused by the broker on the run-control topic and with a
// transactional producer, and its end-of-run record written straight onto the steps topic is
// dead-lettered end_unauthorized; the trainer's forged idle request is dead-lettered
// end_unauthorized and its request naming step 2^62 is a conflict past which the steps
// partition's committed offset moves; meanwhile the run stays active. Then the trainer's `wmrl
// runs end` ends it: its end reaches the calibration changelog.
func (s *secureEnv) checkRunEnds(t *testing.T, h map[string]*e2eHarness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	last := strconv.Itoa(e2eSteps - 1)
	at := time.Now().UTC()

	// 1. The generator: `wmrl runs end` is refused by the broker.
	_, errOut, code := h["generate"].try(time.Minute, "runs", "end", e2eRun, "--last-step", last)
	if code == 0 || !strings.Contains(errOut, "TOPIC_AUTHORIZATION_FAILED") || !strings.Contains(errOut, "may not end runs") {
		t.Errorf("the generator's runs end: exit %d, stderr %q; want TOPIC_AUTHORIZATION_FAILED and the rule", code, errOut)
	}
	// 2. The generator with a transactional producer (which would make its marker look like
	// correct's): refused, under its own id and under correct's prefix.
	marker, err := s.names.StepRecord(topics.EndOfRunMarker(e2eRun, e2eSteps-1, at))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{s.prefix + "generate-end", s.txnPrefix + "forged"} {
		cl := s.clientAs("wmrl-generate", kgo.TransactionalID(id))
		perr := cl.BeginTransaction()
		if perr == nil {
			pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
			perr = cl.ProduceSync(pctx, marker).FirstErr()
			pcancel()
		}
		if !errors.Is(perr, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("the generator's transactional end-of-run record under %s: got %v, want %v", id, perr, kerr.TransactionalIDAuthorizationFailed)
		}
		cl.Close()
	}
	// 3. The generator's marker straight onto the steps topic (it may write steps).
	produce := func(cl *kgo.Client, r *kgo.Record) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		defer pcancel()
		if err := cl.ProduceSync(pctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", r.Topic, err)
		}
	}
	produce(s.clientAs("wmrl-generate"), marker)
	// 4. The trainer (mutual TLS): a forged idle request and one naming step 2^62.
	trainer, err := kgo.NewClient(kgo.SeedBrokers(s.broker.MTLS), kgo.DialTLSConfig(s.broker.Certs.TLS(s.broker.Certs.CA, true)),
		kgo.RequestRetries(2), kgo.RetryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer trainer.Close()
	idle, err := s.names.EndRequestRecord(e2eRun, e2eSteps-1, at)
	if err != nil {
		t.Fatal(err)
	}
	idle.Headers = append(idle.Headers, topics.Header(topics.HeaderEndReason, topics.EndReasonIdle))
	produce(trainer, idle)
	huge, err := s.names.EndRequestRecord(e2eRun, 1<<62, at)
	if err != nil {
		t.Fatal(err)
	}
	produce(trainer, huge)

	want := map[string]string{ // "<source topic> <reason>" of each expected dead letter
		"generator's marker": s.names.Steps() + " end_unauthorized",
		"trainer's idle":     s.names.Runs() + " end_unauthorized",
		"trainer's 2^62":     s.names.Steps() + " conflict",
	}
	var hugeOffset int64 = -1
	dls := map[string]int{}
	s.consumeUntil(ctx, t, s.names.DLQ(), func(r *kgo.Record) bool {
		d, err := topics.ParseDeadLetter(r)
		if err != nil || string(d.Key) != e2eRun {
			return false
		}
		dls[d.SourceTopic+" "+d.Reason]++
		if m, err := topics.DecodeStep(d.Value); err == nil && d.Reason == "conflict" && m.Step == 1<<62 {
			hugeOffset = d.SourceOffset
		}
		for _, w := range want {
			if dls[w] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("dead letters of run %s: %v", e2eRun, dls)
	// The run is still active: no end of it on the calibration changelog.
	if s.runEnded(t) {
		t.Fatalf("run %s ended after the refused ends", e2eRun)
	}
	// Nothing pins the steps partition: correct's committed offset passes the 2^62 record.
	part := topics.PartitionFor(e2eRun, 2)
	adm := s.broker.Admin(t)
	deadline := time.Now().Add(time.Minute)
	for {
		offs, err := adm.FetchOffsets(ctx, s.groups["correct"])
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(s.names.Steps(), part)
		if o.At > hugeOffset {
			t.Logf("steps/%d committed at %d, past the 2^62 end at %d", part, o.At, hugeOffset)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps/%d committed offset %d, not past the 2^62 end-of-run record at %d", part, o.At, hugeOffset)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 5. The trainer ends the run.
	// It waits for correct's verdict, which correct records in Redis under its --redis-prefix (the
	// trainer's mTLS harness has no Redis settings of its own: the secure Redis's are passed here).
	if out := h["train"].run(time.Minute, 0, "runs", "end", e2eRun, "--last-step", last, "--redis", "rediss://"+s.redis.TLS+"/0",
		"--redis-tls-ca", s.broker.Certs.CA, "--redis-password-file", s.secretFile("redis", s.redis.Password), "--redis-prefix", "acl"); !strings.Contains(out, "ended after step "+last) {
		t.Fatalf("the trainer's runs end printed %q", out)
	}
	deadline = time.Now().Add(time.Minute)
	for !s.runEnded(t) {
		if time.Now().After(deadline) {
			t.Fatalf("run %s not ended a minute after the trainer's runs end", e2eRun)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// consumeUntil reads topic read_committed from its start as the super user until done returns
// true for a record (failing the test at ctx's end).
func (s *secureEnv) consumeUntil(ctx context.Context, t *testing.T, topic string, done func(*kgo.Record) bool) {
	t.Helper()
	cl, err := kgo.NewClient(append(s.broker.AdminOpts(), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: the awaited records did not come: %v", topic, ctx.Err())
		}
		for _, r := range fs.Records() {
			if done(r) {
				return
			}
		}
	}
}

// runEnded reports whether the calibration changelog records the end of e2eRun.
func (s *secureEnv) runEnded(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(s.broker.AdminOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, s.names.Calibration())
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	start := map[int32]kgo.Offset{}
	open := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			start[o.Partition], open[o.Partition] = kgo.NewOffset().AtStart(), o.Offset
		}
	})
	if len(open) == 0 {
		return false
	}
	rd, err := kgo.NewClient(append(s.broker.AdminOpts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.names.Calibration(): start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ended := false
	for len(open) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v", s.names.Calibration(), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := open[r.Partition]; ok && r.Offset+1 >= end {
				delete(open, r.Partition)
			}
			if r.Attrs.IsControl() || string(r.Key) != string(topics.CalibrationEndKey(e2eRun)) || !topics.IsCalibrationEnd(r) {
				return
			}
			if e, err := topics.DecodeCalibrationEndRecord(r); err == nil && e.RunID == e2eRun {
				ended = true
			}
		})
	}
	return ended
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
