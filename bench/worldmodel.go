package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/wmrl/wmrl/consumers/worldmodel"

	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// WorldModelConfig configures Benchmark.
type WorldModelConfig struct {
	// Concurrency is C, the scoring calls in flight (default 32).
	Concurrency int
	// Latency is the mock server's fixed reply latency (default 20 ms).
	Latency time.Duration
	// StageLoad: Records counts rollouts scored.
	StageLoad
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
	cfg.StageLoad = cfg.withDefaults(cfg.Concurrency)
	var clock jobClock
	body := []byte(`{"choices":[{"message":{"role":"assistant","content":"{\"score\": 0.5}"},"finish_reason":"stop"}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := clock.start()
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(cfg.Latency)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		clock.done(start)
	}))
	defer srv.Close()

	scorer, err := worldmodel.NewOpenAIScorer(worldmodel.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "bench", MaxIdleConnsPerHost: cfg.Concurrency, Logger: cfg.Logger})
	if err != nil {
		return WorldModelReport{}, err
	}
	timed := &timedScorer{inner: scorer}
	wall, err := cfg.run(ctx, &clock, "bench-worldmodel", topics.Names.Predicted, topics.Rollout{Prompt: "task", Artifact: `{"model": "ridge"}`},
		func(c stage.Config) (stageRunner, error) {
			return worldmodel.NewStage(c, worldmodel.HandlerConfig{Scorer: timed, Concurrency: cfg.Concurrency, Model: "bench"})
		})
	if err != nil {
		return WorldModelReport{}, err
	}
	rep := WorldModelReport{
		Concurrency: cfg.Concurrency, StageConcurrency: cfg.StageConcurrency, Records: cfg.Records, Latency: cfg.Latency, Wall: wall,
		BusyFraction:  float64(clock.busy.Load()) / (float64(cfg.Concurrency) * float64(wall)),
		SlotFraction:  float64(timed.busy.Load()) / (float64(cfg.Concurrency) * float64(wall)),
		RecordsPerSec: float64(cfg.Records) / wall.Seconds(),
		IdealPerSec:   float64(cfg.Concurrency) / cfg.Latency.Seconds(),
		ServerLatency: time.Duration(clock.busy.Load() / int64(cfg.Records)),
	}
	rep.Efficiency = rep.RecordsPerSec / rep.IdealPerSec
	return rep, nil
}

// produceRollouts writes n small rollouts spread over the partitions (one run per partition
// key) before the stage starts, so the measurement is not bounded by a producer.

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
