// Package pacing bounds how far the generator runs ahead of the trainers of its run: before step
// v is published, Pace.Wait blocks while v − t ≥ MaxAhead, where t is the next step the slowest
// trainer has not acknowledged (it has trained steps < t). MaxAhead 1 is on-policy lock-step;
// the paper's asynchronous configs correspond to 9 (AReaL's max_head_offpolicyness, prime-rl's
// max_async_level).
//
// # How a trainer reports its policy version
//
// By its committed offsets: a trainer's consumer group commits on the advantages topic only
// past the steps it acknowledged (sinks/trainer, the Python AdvantageStream/RewardClient commit
// the lowest offset a not-yet-acknowledged step still needs). Pace tails the advantages topic
// (read_committed, headers only) and remembers, per partition, the offset at which each step of
// the run starts; a group's committed offset o then means "trained every step below the first
// step starting at or after o", or every sealed step when none starts there. This needs no new
// record and no change to trainers: any consumer group of the advantages topic that commits
// this way is a trainer. The groups to wait for are named explicitly (wmrl generate
// --trainer-group); a group that has committed nothing yet has trained nothing.
package pacing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/topics"
)

// DefaultPoll is how often a paused generator re-reads the trainers' offsets.
const DefaultPoll = time.Second

// Config configures a Pace.
type Config struct {
	KafkaOpts []kgo.Opt
	Names     topics.Names
	RunID     string
	// Groups are the consumer groups of the run's trainers; Wait follows the slowest.
	Groups []string
	// MaxAhead is K: step v waits while v − (slowest trainer's next step) ≥ K. At least 1.
	MaxAhead int64
	// Poll is the re-check period while paused (default DefaultPoll).
	Poll       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

type start struct {
	offset int64
	step   int64
}

// Pace is the generator's staleness bound. Start it, call Wait before each step, Close it.
type Pace struct {
	cfg  Config
	cl   *kgo.Client
	adm  *kadm.Client
	skip *oversize.Skipper
	log  *slog.Logger
	topi string

	mu        sync.Mutex
	starts    map[int32][]start // per partition: where each step of the run begins, ascending
	maxSealed int64             // highest step of the run seen on the advantages topic (-1: none)

	paused      bool
	pausedSince time.Time

	ahead        prometheus.Gauge
	pausedGauge  prometheus.Gauge
	pauses       prometheus.Counter
	pausedSecond prometheus.Counter
}

// New checks cfg and creates the tailing client; Start begins reading.
func New(cfg Config) (*Pace, error) {
	if cfg.RunID == "" {
		return nil, errors.New("pacing: RunID is required")
	}
	if cfg.MaxAhead < 1 {
		return nil, fmt.Errorf("pacing: max steps ahead %d: want at least 1", cfg.MaxAhead)
	}
	if len(cfg.Groups) == 0 {
		return nil, errors.New("pacing: at least one trainer consumer group is required (--trainer-group)")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	topic := cfg.Names.Advantages()
	// The limit goes first so that one in cfg.KafkaOpts (--max-batch-bytes) overrides it.
	opts := append(append([]kgo.Opt{kgo.MaxDecompressBatchBytes(topics.MaxBatchBytes(topics.MaxAdvantageBytes))}, cfg.KafkaOpts...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("pacing: kafka client: %w", err)
	}
	p := &Pace{
		cfg: cfg, cl: cl, adm: kadm.NewClient(cl), topi: topic, starts: map[int32][]start{}, maxSealed: -1,
		log: cfg.Logger.With("stage", "generate", "run", cfg.RunID),
		ahead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wmrl_generate_steps_ahead",
			Help: "Steps the next published step is ahead of the slowest trainer's next step (paused at --max-steps-ahead)."}),
		pausedGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wmrl_generate_paused",
			Help: "1 while generation waits for the slowest trainer."}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "wmrl_generate_pauses_total",
			Help: "Times generation paused for the slowest trainer."}),
		pausedSecond: prometheus.NewCounter(prometheus.CounterOpts{Name: "wmrl_generate_paused_seconds_total",
			Help: "Time generation spent waiting for the slowest trainer."}),
	}
	p.skip = oversize.NewSkipper(cl, p.log, nil, "not read by pacing")
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.ahead, p.pausedGauge, p.pauses, p.pausedSecond} {
			if err := cfg.Registerer.Register(c); err != nil {
				cl.Close()
				return nil, fmt.Errorf("pacing: metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Start tails the advantages topic until ctx ends or Close.
func (p *Pace) Start(ctx context.Context) {
	go p.tail(ctx)
}

// Close stops the tail and releases the client.
func (p *Pace) Close() { p.cl.Close() }

func (p *Pace) tail(ctx context.Context) {
	for {
		fs := p.cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		// A batch past the limit is skipped unread: pacing only reads where steps start, and
		// the trainers skip the same batch.
		p.skip.Skip(fs)
		fs.EachError(func(t string, part int32, err error) {
			if !oversize.Refused(err) {
				p.log.Warn("pacing: fetch error", "topic", t, "partition", part, "err", err)
			}
		})
		p.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if run, _ := topics.HeaderValue(r.Headers, topics.HeaderRun); run != p.cfg.RunID {
				return
			}
			sv, _ := topics.HeaderValue(r.Headers, topics.HeaderStep)
			step, err := strconv.ParseInt(sv, 10, 64)
			if err != nil {
				return // the trainers reject such a record too; it starts no step
			}
			ss := p.starts[r.Partition]
			if len(ss) == 0 || step > ss[len(ss)-1].step {
				p.starts[r.Partition] = append(ss, start{offset: r.Offset, step: step})
			}
			p.maxSealed = max(p.maxSealed, step)
		})
		p.mu.Unlock()
	}
}

// next is the lowest step group has not acknowledged, from its committed offsets.
func (p *Pace) next(ctx context.Context, group string) (int64, error) {
	resp, err := p.adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, fmt.Errorf("pacing: offsets of trainer group %s: %w", group, err)
	}
	if err := resp.Error(); err != nil {
		return 0, fmt.Errorf("pacing: offsets of trainer group %s: %w", group, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.maxSealed + 1
	for part, ss := range p.starts {
		committed := int64(0)
		if o, ok := resp.Lookup(p.topi, part); ok && o.At >= 0 {
			committed = o.At
		}
		i := sort.Search(len(ss), func(i int) bool { return ss[i].offset >= committed })
		if i < len(ss) && ss[i].step < next {
			next = ss[i].step
		}
	}
	return next, nil
}

// Slowest is the lowest next step over the trainer groups, and that group.
func (p *Pace) Slowest(ctx context.Context) (int64, string, error) {
	var (
		low   int64 = -1
		which string
	)
	for _, g := range p.cfg.Groups {
		n, err := p.next(ctx, g)
		if err != nil {
			return 0, "", err
		}
		if low < 0 || n < low {
			low, which = n, g
		}
	}
	return low, which, nil
}

// Wait returns once step may be published: step − slowest trainer's next step < MaxAhead. It
// logs one line when generation pauses and one when it resumes.
func (p *Pace) Wait(ctx context.Context, step int64) error {
	for {
		slowest, group, err := p.Slowest(ctx)
		if err != nil {
			return err
		}
		ahead := step - slowest
		p.ahead.Set(float64(ahead))
		if ahead < p.cfg.MaxAhead {
			if p.paused {
				d := time.Since(p.pausedSince)
				p.pausedSecond.Add(d.Seconds())
				p.pausedGauge.Set(0)
				p.paused = false
				p.log.Info("generation resumed", "step", step, "trainer_group", group, "trainer_next_step", slowest,
					"steps_ahead", ahead, "max_steps_ahead", p.cfg.MaxAhead, "paused", d.Round(time.Millisecond))
			}
			return nil
		}
		if !p.paused {
			p.paused, p.pausedSince = true, time.Now()
			p.pauses.Inc()
			p.pausedGauge.Set(1)
			p.log.Info("generation paused: the slowest trainer is too far behind", "step", step, "trainer_group", group,
				"trainer_next_step", slowest, "steps_ahead", ahead, "max_steps_ahead", p.cfg.MaxAhead)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.cfg.Poll):
		}
	}
}
