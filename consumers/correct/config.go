package correct

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// Defaults of Config fields left zero.
const (
	DefaultGroup            = "wmrl-correct"
	DefaultKeepStates       = 8
	DefaultRedisPrefix      = statestore.DefaultPrefix
	DefaultTxnTimeout       = 20 * time.Second
	DefaultProgressInterval = 10 * time.Second
	DefaultChangelogTimeout = 60 * time.Second
	DefaultMaxTxnSteps      = 512
	DefaultMaxTxnLinger     = 100 * time.Millisecond
	// DefaultEndedRunRetention keeps an ended run's changelog keys and Redis keys for a day: long
	// enough for dashboards and `wmrl runs` to show a finished run and for late records of it to
	// be dead-lettered as run_ended, short enough that a platform starting 50 runs a day holds
	// about 50 ended runs, not every run ever seen.
	DefaultEndedRunRetention = 24 * time.Hour
)

// Config configures a Consumer. KafkaOpts, Redis and TransactionalID are required; zero values
// elsewhere take the defaults above.
type Config struct {
	// KafkaOpts carries connection options (seeds, SASL, TLS, client id); the consumer adds the
	// group, transaction, isolation and partitioner options itself.
	KafkaOpts []kgo.Opt
	// Redis is the state cache. A hook counting round trips is added to it.
	Redis redis.UniversalClient
	Names topics.Names
	// Group is the consumer group (default DefaultGroup).
	Group string
	// TransactionalID must be unique per live instance and stable across its restarts: a
	// restarted instance with the same id fences its predecessor's unfinished transaction.
	TransactionalID string
	// InstanceID, when set, makes the member static (KIP-345): a restarted instance with the same
	// id takes over its partitions at once instead of waiting for the session timeout.
	InstanceID string
	// SessionTimeout is the group session timeout (default: franz-go's, 45s).
	SessionTimeout time.Duration
	// StartupTimeout bounds the start-up check that the topics exist (default 30s).
	StartupTimeout time.Duration
	// Correction is the math configuration; its zero value means correction.DefaultConfig().
	Correction correction.Config
	// ChunkBytes bounds one Arrow payload on the advantages topic (default topics.DefaultChunkBytes).
	ChunkBytes int
	// KeepStates is how many versioned snapshots per (run, stream) Redis keeps (default 8).
	KeepStates int
	// RedisPrefix namespaces every Redis key (default "wmrl"); replays use their own.
	RedisPrefix string
	// AllowConfigChange lets the consumer continue when stored state was built with another
	// correction config: affected streams restart calibration from an empty window.
	AllowConfigChange bool
	// TxnTimeout is the broker-side transaction timeout (default 20s).
	TxnTimeout time.Duration
	// MaxTxnSteps and MaxTxnLinger bound how a backlog is batched: while fetched records are
	// already waiting in the client, the consumer polls again before sealing, until this many
	// steps are buffered or this long has passed since the first put-off (defaults 512 and
	// 100ms). Fewer, larger transactions drain a backlog faster; live traffic is not delayed,
	// since then nothing is waiting. MaxTxnSteps 1 turns batching off.
	MaxTxnSteps  int
	MaxTxnLinger time.Duration
	// ChangelogTimeout bounds reading the calibration changelog on assignment (default 60s).
	ChangelogTimeout time.Duration
	// MetricsAddr serves /metrics and /healthz when non-empty.
	MetricsAddr string
	// Registry collects metrics; a fresh one is made when nil, with the Go runtime's and the
	// process's series (heap, goroutines, RSS), which an operator and the soak watch for leaks.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// ProgressInterval is the period of the info-level summary line (default 10s).
	ProgressInterval time.Duration
	// OnCommit, when set, is called after every committed transaction with the steps it sealed,
	// once that transaction's Redis write has finished (benchmarks and the demo use it to observe
	// progress without a second consumer). It runs on a goroutine of the consumer, never
	// concurrently with itself, in commit order.
	OnCommit func(sealed []SealedStep)
	// OnRecords, when set, is called after every poll with the number of input records it returned.
	OnRecords func(n int)
	// MaxStaleness, when > 0, masks every row of a step whose manifest's policy_step lags the step
	// by more than this many steps (mask reason "stale"; scores kept, excluded from the group's
	// advantage statistics like a missing reward, anchor pairs still calibrate). Rows carry their
	// staleness whenever the manifest has a policy_step. The sealed state does not depend on it;
	// the rows do (DigestConfig).
	MaxStaleness int64
	// MaxMaskedShare is the share of a step's rows (per stream) masked above which the consumer
	// warns; the share is exported as wmrl_correct_masked_share either way (0: 0.5).
	MaxMaskedShare float64
	// EndedRunRetention is how long after its end an ended run's changelog keys stay (then they
	// are tombstoned, so compaction drops them) and its Redis keys live (retention.go). Zero
	// takes DefaultEndedRunRetention; a negative value keeps them for ever.
	EndedRunRetention time.Duration
	// RunIdleTimeout, when > 0, ends a run without input for this long by publishing its
	// end-of-run record (reason idle) on the steps topic (idle.go); 0 is off.
	RunIdleTimeout time.Duration
	// Limits bound the buffered, incomplete steps (limits.go); zero fields take the defaults.
	Limits Limits
}

// SealedStep identifies one step a committed transaction sealed.
type SealedStep struct {
	Run  string
	Step int64
	Rows int
	// LastInput is when the step's last input record was buffered.
	LastInput time.Time
}

func (c Config) withDefaults() (Config, error) {
	if len(c.KafkaOpts) == 0 {
		return c, fmt.Errorf("%w: KafkaOpts required (at least the seed brokers)", ErrConfig)
	}
	if c.Redis == nil {
		return c, fmt.Errorf("%w: Redis client required", ErrConfig)
	}
	if c.TransactionalID == "" {
		return c, fmt.Errorf("%w: TransactionalID required", ErrConfig)
	}
	c.Group = cmp.Or(c.Group, DefaultGroup)
	// Correction is validated (and hashed) once, by correction.New in NewConsumer.
	c.Correction = cmp.Or(c.Correction, correction.DefaultConfig())
	c.ChunkBytes = cmp.Or(c.ChunkBytes, topics.DefaultChunkBytes)
	c.KeepStates = cmp.Or(c.KeepStates, DefaultKeepStates)
	c.RedisPrefix = cmp.Or(c.RedisPrefix, DefaultRedisPrefix)
	c.TxnTimeout = cmp.Or(c.TxnTimeout, DefaultTxnTimeout)
	c.MaxTxnSteps = cmp.Or(c.MaxTxnSteps, DefaultMaxTxnSteps)
	c.MaxTxnLinger = cmp.Or(c.MaxTxnLinger, DefaultMaxTxnLinger)
	c.EndedRunRetention = cmp.Or(c.EndedRunRetention, DefaultEndedRunRetention)
	c.ChangelogTimeout = cmp.Or(c.ChangelogTimeout, DefaultChangelogTimeout)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, DefaultProgressInterval)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.MaxStaleness < 0 {
		return c, fmt.Errorf("%w: MaxStaleness %d must be >= 0 (0 turns masking off)", ErrConfig, c.MaxStaleness)
	}
	if c.MaxMaskedShare <= 0 {
		c.MaxMaskedShare = DefaultMaxMaskedShare
	}
	var err error
	if c.Limits, err = c.Limits.withDefaults(true); err != nil {
		return c, err
	}
	if c.ChunkBytes < minChunkBytes || c.ChunkBytes > topics.MaxAdvantageBytes {
		return c, fmt.Errorf("%w: ChunkBytes %d not in [%d,%d]", ErrConfig, c.ChunkBytes, minChunkBytes, topics.MaxAdvantageBytes)
	}
	if c.KeepStates < 1 {
		return c, fmt.Errorf("%w: KeepStates %d must be >= 1", ErrConfig, c.KeepStates)
	}
	if !validPrefix(c.RedisPrefix) {
		return c, fmt.Errorf("%w: RedisPrefix %q must be non-empty without '{', '}' or spaces", ErrConfig, c.RedisPrefix)
	}
	if c.MaxTxnSteps < 1 {
		return c, fmt.Errorf("%w: MaxTxnSteps %d must be >= 1", ErrConfig, c.MaxTxnSteps)
	}
	if c.MaxTxnLinger < 0 {
		return c, fmt.Errorf("%w: MaxTxnLinger %v must be >= 0", ErrConfig, c.MaxTxnLinger)
	}
	if c.RunIdleTimeout < 0 {
		return c, fmt.Errorf("%w: RunIdleTimeout %v must be >= 0 (0 turns it off)", ErrConfig, c.RunIdleTimeout)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return c, nil
}

func validPrefix(p string) bool {
	if p == "" {
		return false
	}
	for _, r := range p {
		if r == '{' || r == '}' || r == ' ' || r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

// minChunkBytes: an Arrow IPC stream with one row already needs about 2 KiB of schema and
// batch framing, so smaller chunk limits cannot be met.
const minChunkBytes = 4096
