// Package workload synthesizes the correction consumer's inputs (step manifests, predicted and
// executed rewards) as the generator, world-model and sandbox stages would write them, without
// running those stages: for `wmrl bench correction` and the correction consumer's tests.
package workload

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// Config describes a synthetic workload.
type Config struct {
	Runs, Steps, Groups, GroupSize int
	// AnchorEvery makes every AnchorEvery-th group of a step an anchor group (0: none).
	AnchorEvery int
	// Streams is the number of streams; group g of a step belongs to stream g mod Streams.
	Streams int
	// FailEvery makes every FailEvery-th reward a failure (timeout/error) without a score (0: none).
	FailEvery int
	Seed      uint64
	// RunPrefix names the runs RunPrefix-0, RunPrefix-1, … (default "run").
	RunPrefix string
	// Uninformative draws the world model's score independently of the truth (a judge that ranks
	// nothing), for the trust gate's tests; by default it is a biased, noisy function of it.
	Uninformative bool
}

// Step is one step of one run: its manifest and reward records, in generation order.
type Step struct {
	Run      string
	Step     int64
	Manifest *kgo.Record
	Rewards  []*kgo.Record // predicted then executed
}

// Records returns the step's records: manifest first.
func (s Step) Records() []*kgo.Record { return append([]*kgo.Record{s.Manifest}, s.Rewards...) }

// Synthesize builds the workload deterministically from cfg.Seed, grouped by (run, step) in the
// order a live pipeline would produce it (runs interleaved per step).
func Synthesize(names topics.Names, cfg Config) ([]Step, error) {
	if cfg.Streams < 1 {
		cfg.Streams = 1
	}
	cfg.RunPrefix = cmp.Or(cfg.RunPrefix, "run")
	rng := splitmix(cfg.Seed)
	ts := time.Unix(1_700_000_000, 0).UTC()
	var out []Step
	counter := 0
	for v := 0; v < cfg.Steps; v++ {
		for r := 0; r < cfg.Runs; r++ {
			run := fmt.Sprintf("%s-%d", cfg.RunPrefix, r)
			m := topics.StepManifest{RunID: run, Step: int64(v), PolicyVersion: fmt.Sprintf("p%d", v), CreatedAt: ts}
			var rewards []*kgo.Record
			var execs []*kgo.Record
			for g := 0; g < cfg.Groups; g++ {
				gid := fmt.Sprintf("s%d-g%d", v, g)
				stream := fmt.Sprintf("stream%d", g%cfg.Streams)
				anchor := cfg.AnchorEvery > 0 && g%cfg.AnchorEvery == 0
				m.Groups = append(m.Groups, topics.GroupManifest{GroupID: gid, Stream: stream, Size: cfg.GroupSize, Anchor: anchor})
				difficulty := rng.float()
				for i := 0; i < cfg.GroupSize; i++ {
					ref := topics.RolloutRef{RunID: run, Step: int64(v), GroupID: gid, RolloutID: fmt.Sprintf("%s-r%d", gid, i), Stream: stream, PolicyVersion: m.PolicyVersion}
					truth := clamp01(0.3*difficulty + 0.6*rng.float())
					// A biased, noisy world model: over-confident at the low end.
					pred := clamp01(0.15 + 0.8*truth + 0.1*(rng.float()-0.5))
					if cfg.Uninformative {
						pred = rng.float()
					}
					counter++
					p := topics.PredictedReward{RolloutRef: ref, Anchor: anchor, Status: topics.StatusOK, CreatedAt: ts}
					if cfg.FailEvery > 0 && counter%cfg.FailEvery == 0 {
						p.Status, p.Reason = topics.StatusError, "synthetic failure"
					} else {
						p.Score = &pred
					}
					rec, err := names.PredictedRecord(p)
					if err != nil {
						return nil, err
					}
					rewards = append(rewards, rec)
					if !anchor {
						continue
					}
					x := topics.ExecutedReward{RolloutRef: ref, Status: topics.StatusOK, CreatedAt: ts}
					if cfg.FailEvery > 0 && (counter+1)%cfg.FailEvery == 0 {
						x.Status, x.Reason = topics.StatusTimeout, "synthetic timeout"
					} else {
						t := truth
						x.Score = &t
					}
					rec, err = names.ExecutedRecord(x)
					if err != nil {
						return nil, err
					}
					execs = append(execs, rec)
				}
			}
			mrec, err := names.StepRecord(m)
			if err != nil {
				return nil, err
			}
			out = append(out, Step{Run: run, Step: int64(v), Manifest: mrec, Rewards: append(rewards, execs...)})
		}
	}
	return out, nil
}

func clamp01(x float64) float64 { return math.Min(1, math.Max(0, x)) }

// splitmix is SplitMix64: tiny, seedable and identical everywhere.
type splitmixRNG struct{ s uint64 }

func splitmix(seed uint64) *splitmixRNG { return &splitmixRNG{s: seed} }

func (r *splitmixRNG) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *splitmixRNG) float() float64 { return float64(r.next()>>11) / (1 << 53) }
