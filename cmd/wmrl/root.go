package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/internal/hardening"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// app is what every subcommand gets: the resolved global options, a logger and constructors for
// clients, so no command parses connection flags on its own.
type app struct {
	conn      conn.Options
	keys      apiKeys
	config    string
	logLevel  string
	logFormat string
	log       *slog.Logger
	stdout    io.Writer
	stderr    io.Writer
	// startupTimeout is --startup-timeout; startup carries its deadline from option
	// resolution on, for every check a command makes before it runs.
	startupTimeout time.Duration
	startup        context.Context
	stopStartup    context.CancelFunc
}

// commandFuncs holds the constructors of the subcommands; each command's file registers itself
// from init so commands can be added without touching this file.
var commandFuncs []func(*app) *cobra.Command

func register(f func(*app) *cobra.Command) { commandFuncs = append(commandFuncs, f) }

// exitError carries a specific exit status (e.g. 1 for "check found mismatches").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func run(args []string) int {
	a := &app{stdout: os.Stdout, stderr: os.Stderr}
	// First, before any secret is read: other processes of this uid cannot read the stage's
	// /proc/<pid>/environ or memory (see internal/hardening).
	if err := hardening.SetNonDumpable(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		fmt.Fprintln(a.stderr, "wmrl:", err)
		return 2
	}
	root := newRoot(a)
	if err := unknownSubcommand(root, args); err != nil {
		fmt.Fprintln(a.stderr, "wmrl:", err)
		return 2
	}
	root.SetArgs(args)
	err := root.Execute()
	if a.stopStartup != nil {
		a.stopStartup()
	}
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		if ee.err != nil {
			fmt.Fprintln(a.stderr, "wmrl:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(a.stderr, "wmrl:", err)
	return 2
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "wmrl",
		Short: "World Model RL reward correction on Kafka",
		Long: `wmrl scores most GRPO rollout groups with a world model and corrects it with a small anchor
stream of real executions (Online Debiasing + Inverse-Variance Denoising), as Kafka stages:

  generate ─► rollouts ─┬─► worldmodel ─► rewards.predicted ─┐
                        └─► sandbox ────► rewards.executed ──┴─► correct ─► advantages ─► train / analytics

Every global option can also be set by an environment variable WMRL_<OPTION> (dashes become
underscores, e.g. WMRL_BROKERS, WMRL_SASL_PASSWORD) or by a YAML file given with --config, whose
keys are the option names (brokers: [..], redis: redis://..). Precedence: flag, env, file, default.
An unknown WMRL_* variable or config key is an error, so a misspelt option cannot go unnoticed.

Credentials are best read from files (--sasl-password-file, --redis-password-file, and
worldmodel's --wm-api-key-file, generate's --policy-api-key-file). Once the options are read, the
credential variables are removed from the environment (children do not inherit them) and, on
Linux, the process is non-dumpable (other processes of its uid cannot read its environment).`,
		Version:           versionString(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: a.preRun,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("wmrl version {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	f := root.PersistentFlags()
	f.StringVar(&a.config, "config", "", "YAML config file with option values (keys are option names)")
	f.StringSliceVar(&a.conn.Brokers, "brokers", []string{"127.0.0.1:9092"}, "Kafka seed brokers, comma-separated")
	f.StringVar(&a.conn.ClientID, "client-id", defaultClientID, "Kafka client id (train's default: wmrl-trainer/<run>, which tells other trainers in its group which run it serves)")
	f.StringVar(&a.conn.TopicPrefix, "topic-prefix", topics.DefaultPrefix, "prefix of every wmrl topic name")
	a.conn.Format = topics.FormatJSON
	f.Var(&a.conn.Format, "format", "format the stages write the record topics in (rollouts, steps, rewards): json or protobuf (schemas/wmrl/v1; docs/formats.md); readers decode each record by its content-type header")
	f.StringVar(&a.conn.SASLMechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	f.StringVar(&a.conn.SASLUser, "sasl-user", "", "SASL user name")
	f.StringVar(&a.conn.SASLPassword, "sasl-password", "", "SASL password (prefer --sasl-password-file; never the flag, argv is public)")
	f.String("sasl-password-file", "", "file holding the SASL password (trailing line breaks removed)")
	f.BoolVar(&a.conn.TLS, "tls", false, "connect to Kafka with TLS (implied by any --tls-* file)")
	f.StringVar(&a.conn.TLSCA, "tls-ca", "", "PEM file with the CA certificates that sign the brokers' certificates")
	f.StringVar(&a.conn.TLSCert, "tls-cert", "", "PEM client certificate for mutual TLS")
	f.StringVar(&a.conn.TLSKey, "tls-key", "", "PEM client key for mutual TLS")
	f.StringVar(&a.conn.TLSServerName, "tls-server-name", "", "server name to verify instead of the broker host")
	f.BoolVar(&a.conn.TLSSkipVerify, "tls-skip-verify", false, "do not verify broker certificates (lab clusters only)")
	f.IntVar(&a.conn.MaxBatchBytes, "max-batch-bytes", 0, "a consumer refuses a record batch that decompresses to more bytes (dead-lettered by reference and skipped; bounds what one batch costs memory); 0: twice the stage's largest valid record, at least 16 MiB (docs/reliability.md)")
	f.StringVar(&a.conn.RedisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL: redis:// or rediss:// (TLS), optional user:password@ and /db (put the password in --redis-password-file); a Redis Cluster: several seeds redis://h1:7000,h2:7001 (or redis-cluster://host:port); Sentinel: redis-sentinel://h1:26379,h2:26379/mymaster[/db]")
	f.String("redis-password-file", "", "file holding the Redis password, for a --redis URL without one (trailing line breaks removed)")
	f.StringVar(&a.conn.RedisTLSCA, "redis-tls-ca", "", "PEM file with the CA certificates that sign the rediss:// server's certificate (default: system roots)")
	f.StringVar(&a.conn.RedisTLSCert, "redis-tls-cert", "", "PEM client certificate for a rediss:// server that requires one")
	f.StringVar(&a.conn.RedisTLSKey, "redis-tls-key", "", "PEM client key for --redis-tls-cert")
	f.StringSliceVar(&a.conn.Registry.URLs, "schema-registry", nil, "Confluent-compatible schema registry base URL(s), comma-separated (Apicurio: http://host:8080/apis/ccompat/v7); empty: none. topics create and the stages register each topic's schema under <topic>-value, the stages write every topic (rollouts, steps, rewards, advantages, calibration) Confluent-framed and check the schema ids they read; replay checks them as correct did (implies --format protobuf), topics check reports the subjects")
	f.StringVar(&a.conn.Registry.User, "schema-registry-user", "", "schema registry HTTP basic-auth user")
	f.StringVar(&a.conn.Registry.Password, "schema-registry-password", "", "schema registry basic-auth password (prefer --schema-registry-password-file)")
	f.String("schema-registry-password-file", "", "file holding the schema registry password (trailing line breaks removed)")
	f.StringVar(&a.conn.Registry.TLSCA, "schema-registry-tls-ca", "", "PEM file with the CA certificates that sign an https:// registry's certificate (default: system roots)")
	f.StringVar(&a.conn.Registry.TLSCert, "schema-registry-tls-cert", "", "PEM client certificate for a registry that requires one")
	f.StringVar(&a.conn.Registry.TLSKey, "schema-registry-tls-key", "", "PEM client key for --schema-registry-tls-cert")
	f.DurationVar(&a.conn.Registry.NegativeTTL, "schema-registry-negative-ttl", schemareg.DefaultNegativeTTL, "how long a schema id the registry did not know (or knew under another subject) is refused from memory before the registry is asked again: a writer that registered late has its records dead-lettered for at most this long")
	f.StringVar(&a.conn.Registry.Compat, "schema-compatibility", "BACKWARD", "compatibility level set on wmrl's subjects: BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE or NONE")
	f.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&a.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&a.startupTimeout, "startup-timeout", 30*time.Second, "deadline for the start-up checks (brokers, Redis, topics): a stage that cannot start fails within it")
	for _, fn := range commandFuncs {
		root.AddCommand(fn(a))
	}
	return root
}

// unknownSubcommand refuses an unknown subcommand of a command group (topics, runs, bench, …):
// cobra prints such a group's help and exits 0 for `wmrl topics crate`, so a typo in a script
// would pass as success. The root already refuses one; a group without an argument still
// prints its help.
func unknownSubcommand(root *cobra.Command, args []string) error {
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root || !cmd.HasSubCommands() || cmd.Runnable() {
		return nil
	}
	if a := firstOperand(cmd, rest); a != "" {
		cmd.SuggestionsMinimumDistance = cmp.Or(cmd.SuggestionsMinimumDistance, 2) // cobra's default, applied only on its own path
		msg := fmt.Sprintf("unknown command %q for %q", a, cmd.CommandPath())
		if s := cmd.SuggestionsFor(a); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return fmt.Errorf("%s; see %s --help", msg, cmd.CommandPath())
	}
	return nil
}

// firstOperand is the first argument that is neither a flag nor a flag's value ("" if none).
func firstOperand(cmd *cobra.Command, args []string) string {
	lookup := func(a string) *pflag.Flag {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			return cmp.Or(cmd.Flags().Lookup(name), cmd.InheritedFlags().Lookup(name))
		}
		if len(a) == 2 {
			return cmp.Or(cmd.Flags().ShorthandLookup(a[1:]), cmd.InheritedFlags().ShorthandLookup(a[1:]))
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case a == "-" || !strings.HasPrefix(a, "-"):
			return a
		case strings.Contains(a, "="):
		default:
			if f := lookup(a); f != nil && f.NoOptDefVal == "" {
				i++ // the flag's value
			}
		}
	}
	return ""
}

// preRun resolves every option (flag, env, file, default) before any command runs and starts
// the start-up deadline.
func (a *app) preRun(cmd *cobra.Command, _ []string) error {
	if err := checkEnv(os.Environ(), allFlagNames()); err != nil {
		return err
	}
	if err := applyConfig(cmd.Flags(), a.config, os.LookupEnv); err != nil {
		return err
	}
	if err := a.readSecrets(cmd.Flags(), os.LookupEnv); err != nil {
		return err
	}
	if err := scrubSecretEnv(); err != nil {
		return err
	}
	if a.startupTimeout <= 0 {
		return fmt.Errorf("--startup-timeout %v: want > 0", a.startupTimeout)
	}
	if err := a.resolveFormat(cmd); err != nil {
		return err
	}
	a.startup, a.stopStartup = context.WithTimeout(context.Background(), a.startupTimeout)
	return a.setupLogger()
}

// startupContext carries the start-up deadline (none before preRun, e.g. in tests that call a
// command's helpers directly).
func (a *app) startupContext() context.Context {
	if a.startup == nil {
		return context.Background()
	}
	return a.startup
}

// startupLeft is what remains of the start-up deadline, for checks that stages make themselves
// once running; at least a millisecond, since zero means "default" to them.
func (a *app) startupLeft() time.Duration {
	dl, ok := a.startupContext().Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(dl), time.Millisecond)
}

func (a *app) setupLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", a.logLevel, err)
	}
	ho := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(a.logFormat) {
	case "text":
		a.log = slog.New(slog.NewTextHandler(a.stderr, ho))
	case "json":
		a.log = slog.New(slog.NewJSONHandler(a.stderr, ho))
	default:
		return fmt.Errorf("--log-format %q: want text or json", a.logFormat)
	}
	slog.SetDefault(a.log)
	// go-redis prints its dial retries to stderr on its own; they belong at debug level, below
	// the one error line a failed start-up check prints.
	redis.SetLogger(redisLogger{a.log})
	return nil
}

// redisLogger routes go-redis's internal messages to slog at debug level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// signalContext is cancelled on SIGINT or SIGTERM so stages can finish in-flight work, commit
// and leave their group before exiting. A second signal while that runs (a judge that never
// answers holds a drain for its whole timeout) exits the process at once with 128+signal, as
// a shell reports a killed command: the operator asked twice.
func signalContext() (context.Context, context.CancelFunc) {
	return forceOnSecondSignal(slog.Default(), os.Exit)
}

// forceOnSecondSignal is signalContext with its logger and exit injectable.
func forceOnSecondSignal(log *slog.Logger, exit func(int)) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-stopped:
			return
		}
		log.Warn("stopping: finishing in-flight work; interrupt again to exit at once")
		cancel()
		select {
		case sig := <-ch:
			log.Error("second signal: exiting at once, in-flight work not finished", "signal", sig.String())
			code := 130
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			exit(code)
		case <-stopped:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(stopped)
			cancel()
		})
	}
}

// kafka builds a client from the global options plus stage-specific ones.
func (a *app) kafka(extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := a.kafkaOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// admin returns a kadm client and a close function for the underlying connection.
func (a *app) admin() (*kadm.Client, func(), error) {
	cl, err := a.kafka()
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// redis returns a client after one PING, so a wrong password, CA or scheme fails the command at
// once with the cause (conn.CheckRedis).
func (a *app) redis() (redis.UniversalClient, error) {
	target, err := a.conn.RedisTarget()
	if err != nil {
		return nil, err
	}
	// The check gets a client of its own that honours the start-up deadline: go-redis's dial
	// and connection set-up otherwise run on their own timeouts (5 s and more).
	check := target.Client(true)
	err = conn.CheckRedis(a.startupContext(), check, target.TLS())
	_ = check.Close()
	if err != nil {
		where := conn.RedactURL(a.conn.RedisURL)
		if k := target.Kind(); k != conn.RedisSingle {
			where += " (" + k + ")"
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return target.Client(false), nil
}

// kafkaOpts returns the connection options after one metadata round trip (conn.Check): a stage
// would otherwise retry a wrong password or certificate forever without saying why.
func (a *app) kafkaOpts() ([]kgo.Opt, error) {
	opts, err := a.conn.KafkaOpts()
	if err != nil {
		return nil, err
	}
	if err := conn.Check(a.startupContext(), opts); err != nil {
		return nil, err
	}
	return opts, nil
}
