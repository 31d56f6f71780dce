package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wmrl/wmrl/consumers/worldmodel"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// WorldModelConfig configures Benchmark.
type WorldModelConfig struct {
	// Concurrency is C, the scoring calls in flight (default 32).
	Concurrency int
	// Latency is the mock server's fixed reply latency (default 20 ms).
	Latency time.Duration
	// Records is the number of rollouts scored (default 50·C).
	Records int
	// StageConcurrency overrides the runtime's handler count (0 = worldmodel.NewStage's 2·C). Setting it to
	// C shows what holding a scoring slot through the produce acknowledgement costs.
	StageConcurrency int
	// Partitions of the in-process topics (default 3).
	Partitions int
	Logger     *slog.Logger
}

// WorldModelReport is what Benchmark measured. The window runs from the first request reaching the
// mock server to the last predicted record read back from the output topic, so it includes the
// runtime's polling, produce and commit work but not the consumer group join.
type WorldModelReport struct {
	Concurrency      int
	StageConcurrency int
	Records          int
	Latency          time.Duration
	Wall             time.Duration
	// BusyFraction is the server-observed in-flight time over C × Wall (1 = never idle).
	BusyFraction float64
	// SlotFraction is the time spent inside worldmodel.Scorer.Score calls over C × Wall: how full the
	// runtime and Handler keep the C scoring slots. BusyFraction is lower by the client's own
	// per-request work (prompt rendering, HTTP round trip, reply parsing).
	SlotFraction float64
	// RecordsPerSec against IdealPerSec = C / Latency; Efficiency is their ratio.
	RecordsPerSec, IdealPerSec, Efficiency float64
	// ServerLatency is the mock's mean handling time: time.Sleep overshoots on a loaded machine,
	// which lowers Efficiency against the nominal latency without any idling in the pipeline.
	ServerLatency time.Duration
}

func (r WorldModelReport) String() string {
	return fmt.Sprintf("worldmodel C=%d handlers=%d latency=%v records=%d: busy=%.3f of C (slots %.3f), %.0f rec/s vs ideal %.0f (eff %.3f), server mean %.2fms, wall %v",
		r.Concurrency, r.StageConcurrency, r.Latency, r.Records, r.BusyFraction, r.SlotFraction, r.RecordsPerSec, r.IdealPerSec, r.Efficiency,
		float64(r.ServerLatency.Microseconds())/1000, r.Wall.Round(time.Millisecond))
}

// Benchmark runs the world-model stage — the real consumer path: stage runtime, Handler,
// OpenAIScorer — on an in-process Kafka (kfake) against a fixed-latency OpenAI-compatible mock,
// and reports how close it keeps C requests in flight.
func WorldModel(ctx context.Context, cfg WorldModelConfig) (WorldModelReport, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Latency <= 0 {
		cfg.Latency = 20 * time.Millisecond
	}
	if cfg.Records <= 0 {
		cfg.Records = 50 * cfg.Concurrency
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.StageConcurrency == 0 {
		cfg.StageConcurrency = 2 * cfg.Concurrency
	}
	names := topics.NewNames("bench.")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(cfg.Partitions), names.Rollouts(), names.Predicted(), names.DLQ()))
	if err != nil {
		return WorldModelReport{}, fmt.Errorf("kfake: %w", err)
	}
	defer cluster.Close()
	seeds := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}

	var busy atomic.Int64
	var first sync.Once
	var firstAt time.Time
	body := []byte(`{"choices":[{"message":{"role":"assistant","content":"{\"score\": 0.5}"},"finish_reason":"stop"}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		first.Do(func() { firstAt = start })
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(cfg.Latency)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		busy.Add(int64(time.Since(start)))
	}))
	defer srv.Close()

	if err := produceRollouts(ctx, seeds, names, cfg.Records, cfg.Partitions); err != nil {
		return WorldModelReport{}, err
	}
	scorer, err := worldmodel.NewOpenAIScorer(worldmodel.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "bench", MaxIdleConnsPerHost: cfg.Concurrency, Logger: cfg.Logger})
	if err != nil {
		return WorldModelReport{}, err
	}
	timed := &timedScorer{inner: scorer}
	st, err := worldmodel.NewStage(stage.Config{Names: names, Group: "bench-worldmodel", KafkaOpts: seeds, Concurrency: cfg.StageConcurrency, Logger: cfg.Logger},
		worldmodel.HandlerConfig{Scorer: timed, Concurrency: cfg.Concurrency, Model: "bench"})
	if err != nil {
		return WorldModelReport{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- st.Run(runCtx) }()

	end, err := awaitRecords(ctx, seeds, names.Predicted(), cfg.Records)
	stop()
	if rerr := <-runErr; err == nil {
		err = rerr
	}
	if err != nil {
		return WorldModelReport{}, err
	}
	wall := end.Sub(firstAt)
	rep := WorldModelReport{
		Concurrency: cfg.Concurrency, StageConcurrency: cfg.StageConcurrency, Records: cfg.Records, Latency: cfg.Latency, Wall: wall,
		BusyFraction:  float64(busy.Load()) / (float64(cfg.Concurrency) * float64(wall)),
		SlotFraction:  float64(timed.busy.Load()) / (float64(cfg.Concurrency) * float64(wall)),
		RecordsPerSec: float64(cfg.Records) / wall.Seconds(),
		IdealPerSec:   float64(cfg.Concurrency) / cfg.Latency.Seconds(),
		ServerLatency: time.Duration(busy.Load() / int64(cfg.Records)),
	}
	rep.Efficiency = rep.RecordsPerSec / rep.IdealPerSec
	return rep, nil
}

// produceRollouts writes n small rollouts spread over the partitions (one run per partition
// key) before the stage starts, so the measurement is not bounded by a producer.
func produceRollouts(ctx context.Context, seeds []kgo.Opt, names topics.Names, n, runs int) error {
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		g := strconv.Itoa(i / 8)
		rec, err := names.RolloutRecord(topics.Rollout{
			RunID: "bench-" + strconv.Itoa(i%runs), GroupID: g, RolloutID: g + "-" + strconv.Itoa(i%8), Stream: "main",
			Index: i % 8, Prompt: "task", Artifact: `{"model": "ridge"}`, CreatedAt: time.Now(),
		})
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce rollouts: %w", err)
	}
	return nil
}

// timedScorer sums the time spent inside Score.
type timedScorer struct {
	inner worldmodel.Scorer
	busy  atomic.Int64
}

func (t *timedScorer) Score(ctx context.Context, in worldmodel.Input) (worldmodel.Result, error) {
	start := time.Now()
	defer func() { t.busy.Add(int64(time.Since(start))) }()
	return t.inner.Score(ctx, in)
}
