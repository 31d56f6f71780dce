package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/topics"
)

// CorrectionReport is the result of Benchmark.
type CorrectionReport struct {
	Records           int
	PassThroughPerSec float64
	CorrectionPerSec  float64
	Ratio             float64
	SealedSteps       int
	Transactions      int
	RedisTrips        int64
	TripsPerStep      float64
	TripsPerTxn       float64
	LatencyP50        time.Duration
	LatencyP99        time.Duration
	LatencySamples    int
	// LatencyCPU is the process's CPU time during the latency phase, where every step is its own
	// transaction: an upper bound on a sparse live step's cost, since it includes the probe's
	// producer and read_committed reader, which run in the same process.
	LatencyCPU         time.Duration
	PassThroughElapsed time.Duration
	CorrectionElapsed  time.Duration
	// PassThroughCPU and CorrectionCPU are the process's CPU time (user + system) during each phase.
	PassThroughCPU time.Duration
	CorrectionCPU  time.Duration
	// CalibrationBytes is the size of the calibration topic's log on the broker after the
	// throughput phase; per sealed (run, stream) step it is CalibrationBytesPerStep.
	CalibrationBytes        int64
	CalibrationBytesPerStep float64
	// TopicBytes, by topic suffix (topics.SuffixSteps, …), is the size of every benchmark topic's
	// log on the broker (one replica) after the throughput phase wrote SealedSteps run steps to
	// them: the inputs, as the generator, world-model and sandbox stages would write them, and
	// the correction consumer's outputs, batch headers and transaction markers included.
	TopicBytes map[string]int64
	// SparseTopicBytes is what the latency phase added to each log, LatencySamples steps of one
	// run, each step its own transaction (as steps arriving one at a time are).
	SparseTopicBytes map[string]int64
	// RebuildStreams (run, stream) states were rebuilt from the calibration topic in RebuildTime,
	// growing the live heap by RebuildHeapBytes.
	RebuildStreams   int
	RebuildTime      time.Duration
	RebuildHeapBytes int64
}

// String is the report as `wmrl bench correction` prints it; bench/capacity_table.py parses its
// lines (records per CPU-second, broker bytes per run step, CPU per step), so keep their prefixes.
func (r CorrectionReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "records                      %d (steps, predicted, executed)\n", r.Records)
	fmt.Fprintf(&b, "pass-through txn consume→produce  %10.0f records/s  (%v)\n", r.PassThroughPerSec, r.PassThroughElapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "correction consumer               %10.0f records/s  (%v)\n", r.CorrectionPerSec, r.CorrectionElapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "ratio correction / pass-through   %10.3f\n", r.Ratio)
	fmt.Fprintf(&b, "calibration bytes per sealed (run, stream) step: %.0f  (broker log %d bytes)\n", r.CalibrationBytesPerStep, r.CalibrationBytes)
	fmt.Fprintf(&b, "rebuild from the changelog: %d (run, stream) states in %v, live heap +%.1f MiB\n",
		r.RebuildStreams, r.RebuildTime.Round(time.Millisecond), float64(r.RebuildHeapBytes)/(1<<20))
	fmt.Fprintf(&b, "process CPU: correction %.2fs, pass-through %.2fs (ratio %.2f)\n",
		r.CorrectionCPU.Seconds(), r.PassThroughCPU.Seconds(), r.CPURatio())
	fmt.Fprintf(&b, "correction records per CPU-second (records/s per core): %.0f\n", r.RecordsPerCPUSecond())
	perStep := func(what string, bytes map[string]int64, steps int) {
		if steps == 0 || len(bytes) == 0 {
			return
		}
		fmt.Fprintf(&b, "broker log bytes per run step, %s (one replica):", what)
		for _, t := range slices.Sorted(maps.Keys(bytes)) {
			fmt.Fprintf(&b, " %s=%.0f", t, float64(bytes[t])/float64(steps))
		}
		b.WriteString("\n")
	}
	perStep("backlog", r.TopicBytes, r.SealedSteps)
	perStep("one step per transaction", r.SparseTopicBytes, r.LatencySamples)
	fmt.Fprintf(&b, "sealed steps %d in %d transactions; Redis round trips %d: %.3f per sealed step, %.3f per transaction\n",
		r.SealedSteps, r.Transactions, r.RedisTrips, r.TripsPerStep, r.TripsPerTxn)
	fmt.Fprintf(&b, "latency last reward → advantages visible (read_committed), %d steps: p50 %v  p99 %v\n",
		r.LatencySamples, r.LatencyP50.Round(time.Microsecond), r.LatencyP99.Round(time.Microsecond))
	if r.LatencySamples > 0 {
		fmt.Fprintf(&b, "CPU per step when each step is its own transaction (latency phase, probe included): %v\n",
			(r.LatencyCPU / time.Duration(r.LatencySamples)).Round(time.Microsecond))
	}
	return b.String()
}

// RecordsPerCPUSecond is the input records the correction consumer processed per second of the
// process's CPU time during its phase: its throughput per core, whatever GOMAXPROCS is.
func (r CorrectionReport) RecordsPerCPUSecond() float64 {
	if r.CorrectionCPU <= 0 {
		return 0
	}
	return float64(r.Records) / r.CorrectionCPU.Seconds()
}

// latencyPhase measures the step latency of sparse steps (cfg.LatencySteps) with the consumer
// still running, and the topic bytes they added.
func (rep *CorrectionReport) latencyPhase(ctx context.Context, lat *latencyProbe, cfg CorrectionConfig, adm *kadm.Client, names topics.Names) error {
	cpu0 := cpuTime()
	samples, err := lat.run(ctx, cfg, names)
	rep.LatencyCPU = cpuTime() - cpu0
	if err != nil {
		return fmt.Errorf("latency phase: %w", err)
	}
	after, err := topicLogBytes(ctx, adm, names, cfg.Partitions)
	if err != nil {
		return err
	}
	rep.SparseTopicBytes = make(map[string]int64, len(after))
	for t, n := range after {
		rep.SparseTopicBytes[t] = n - rep.TopicBytes[t]
	}
	slices.Sort(samples)
	rep.LatencySamples = len(samples)
	if len(samples) > 0 {
		rep.LatencyP50 = samples[len(samples)/2]
		rep.LatencyP99 = samples[min(len(samples)-1, int(float64(len(samples))*0.99))]
	}
	return nil
}

// changelogCost measures the calibration topic's log size on the broker and the time and heap it
// takes to rebuild every (run, stream) state from it.
func changelogCost(ctx context.Context, rep *CorrectionReport, adm *kadm.Client, cfg CorrectionConfig, opts []kgo.Opt, names topics.Names) error {
	parts := make([]int32, cfg.Partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	// The throughput phase's steps only (the latency phase's are on the log too, and rebuilt).
	rep.CalibrationBytes = rep.TopicBytes[topics.SuffixCalibration]
	rep.CalibrationBytesPerStep = float64(rep.CalibrationBytes) / float64(rep.SealedSteps*max(cfg.Workload.Streams, 1))
	start := time.Now()
	states, err := correct.RebuildFromChangelog(ctx, opts, names, parts, 2*time.Minute, cfg.Logger)
	if err != nil {
		return fmt.Errorf("rebuild from the changelog: %w", err)
	}
	rep.RebuildTime = time.Since(start)
	rep.RebuildStreams = len(states)
	rep.RebuildHeapBytes = retainedBy(func() { states = nil })
	return nil
}

// topicLogBytes returns the size of each topic's log on the brokers by topic suffix (every
// replica's log dir summed, so one replica on a single broker), from DescribeLogDirs.
func topicLogBytes(ctx context.Context, adm *kadm.Client, names topics.Names, partitions int32) (map[string]int64, error) {
	var set kadm.TopicsSet
	for _, t := range names.All() {
		for p := range partitions {
			set.Add(t, p)
		}
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("topic log sizes: %w", err)
	}
	out := make(map[string]int64)
	dirs.Each(func(d kadm.DescribedLogDir) {
		for t, ps := range d.Topics {
			for _, p := range ps {
				out[strings.TrimPrefix(t, names.EffectivePrefix())] += p.Size
			}
		}
	})
	return out, nil
}

// retainedBy returns how much the live heap shrinks when release drops the references it holds.
func retainedBy(release func()) int64 {
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	release()
	runtime.GC()
	runtime.ReadMemStats(&without)
	return int64(with.HeapAlloc) - int64(without.HeapAlloc)
}
