//go:build soak

package soak

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

// fleet publishes the runs and follows their advantage rows.
//
// A run is what `wmrl generate` (its manifests), the world-model stage (predicted rewards) and
// the sandbox (executed rewards of the anchor groups) would write for it, synthesized by
// bench/workload, then the end-of-run record naming its last step, which generate writes when
// its input ends. concurrent runs are in flight; each tick every one of them publishes its next
// step, and a run that has published its last step ends and gives its slot to a new run. Slots
// start staggered, so runs end at an even pace.
type fleet struct {
	h       *harness
	perRun  int // advantage rows per run
	started atomic.Int64
	mu      sync.Mutex
	flight  map[string]bool // published, not yet ended (all rows seen)
	endSent map[string]bool // end-of-run record published
	rows    map[string][]topics.AdvantageRow
	counts  map[string]int // rows per (run, step, rollout)
	ended   []string       // in the order their last row arrived
	prodErr error
}

func newFleet(h *harness) *fleet {
	return &fleet{h: h, perRun: h.sh.steps * h.sh.groups * h.sh.groupSize, flight: map[string]bool{},
		endSent: map[string]bool{}, rows: map[string][]topics.AdvantageRow{}, counts: map[string]int{}}
}

func runID(n int) string { return fmt.Sprintf("soak%05d-0", n) }

// synth is run n's records, step by step (its seed differs from every other run's).
func (w *fleet) synth(n int) ([]workload.Step, error) {
	sh := w.h.sh
	return workload.Synthesize(w.h.names, workload.Config{Runs: 1, Steps: sh.steps, Groups: sh.groups, GroupSize: sh.groupSize,
		AnchorEvery: 3, Streams: sh.streams, FailEvery: 23, Seed: uint64(n + 1), RunPrefix: fmt.Sprintf("soak%05d", n)})
}

// produce publishes every run; it stops at the first error (reported by checkAlive).
func (w *fleet) produce() {
	sh := w.h.sh
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.h.kafka.Seeds...), kgo.RecordRetries(1<<30), kgo.ProduceRequestTimeout(30*time.Second))
	if err != nil {
		w.fail(err)
		return
	}
	defer cl.Close()
	type slot struct {
		n     int
		steps []workload.Step
		next  int
	}
	slots := make([]*slot, sh.concurrent)
	next := 0
	newRun := func() (*slot, error) {
		if next >= sh.runs {
			return nil, nil
		}
		steps, err := w.synth(next)
		if err != nil {
			return nil, err
		}
		s := &slot{n: next, steps: steps}
		next++
		w.started.Add(1)
		w.mu.Lock()
		w.flight[runID(s.n)] = true
		w.mu.Unlock()
		return s, nil
	}
	for i := range slots {
		s, err := newRun()
		if err != nil {
			w.fail(err)
			return
		}
		// Staggered: slot i waits i·steps/concurrent ticks before its first run's first step.
		s.next = -(i * sh.steps / sh.concurrent)
		slots[i] = s
	}
	tick := time.NewTicker(sh.tick)
	defer tick.Stop()
	for {
		var recs []*kgo.Record
		live := 0
		for i, s := range slots {
			if s == nil {
				continue
			}
			live++
			if s.next < 0 {
				s.next++
				continue
			}
			recs = append(recs, s.steps[s.next].Records()...)
			s.next++
			if s.next < len(s.steps) {
				continue
			}
			run := runID(s.n)
			end, err := w.h.names.EndRequestRecord(run, int64(sh.steps-1), time.Unix(1_700_000_000, 0).UTC())
			if err != nil {
				w.fail(err)
				return
			}
			recs = append(recs, end)
			w.mu.Lock()
			w.endSent[run] = true
			w.mu.Unlock()
			if slots[i], err = newRun(); err != nil {
				w.fail(err)
				return
			}
		}
		if live == 0 {
			return
		}
		// Copies: the client sets fields of the records it produces.
		cp := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := cl.ProduceSync(ctx, cp...).FirstErr()
		cancel()
		if err != nil {
			w.fail(fmt.Errorf("produce: %w", err))
			return
		}
		<-tick.C
	}
}

func (w *fleet) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.prodErr == nil {
		w.prodErr = err
	}
}

// checkAlive fails the test when the producer failed or a correct process exited by itself.
func (w *fleet) checkAlive() {
	w.mu.Lock()
	err := w.prodErr
	w.mu.Unlock()
	if err != nil {
		w.h.t.Fatalf("producer: %v", err)
	}
	procs, _ := w.h.instances()
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.Done:
			if !p.stopped {
				w.h.t.Fatalf("%s exited by itself (%v); see %s", p.Name, p.Cmd.ProcessState, p.log.Name())
			}
		default:
		}
	}
}

// follow reads the advantages topic read_committed in the background.
func (w *fleet) follow() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.h.kafka.Seeds...), kgo.ConsumeTopics(w.h.names.Advantages()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			w.fail(err)
			return
		}
		defer cl.Close()
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
				rows, err := topics.DecodeAdvantageRecord(rec)
				if err != nil {
					w.fail(fmt.Errorf("advantages offset %d: %w", rec.Offset, err))
					return
				}
				w.add(rows)
			})
		}
	}()
	return func() { cancel(); <-done }
}

func (w *fleet) add(rows []topics.AdvantageRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rows {
		w.counts[fmt.Sprintf("%s/%d/%s", r.RunID, r.Step, r.RolloutID)]++
		w.rows[r.RunID] = append(w.rows[r.RunID], r)
		if len(w.rows[r.RunID]) == w.perRun && w.flight[r.RunID] {
			delete(w.flight, r.RunID)
			w.ended = append(w.ended, r.RunID)
		}
	}
}

// endedNow is the number of runs whose every row has arrived (their end-of-run record was
// published with their last step).
func (w *fleet) endedNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ended)
}

// inFlight returns the runs started and not yet ended.
func (w *fleet) inFlight() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for r := range w.flight {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func (w *fleet) waitAllEnded(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for w.endedNow() < w.h.sh.runs {
		w.checkAlive()
		if time.Now().After(deadline) {
			w.h.t.Fatalf("%d of %d runs ended after %v; still in flight: %v", w.endedNow(), w.h.sh.runs, limit, w.inFlight())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exactness counts what arrived against what was published.
type exactness struct {
	want, got, lost, dup, runs int
}

func (w *fleet) exactlyOnce() exactness {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := exactness{want: w.h.sh.runs * w.perRun, runs: len(w.ended)}
	seen := 0
	for _, c := range w.counts {
		e.got += c
		e.dup += c - 1
		seen++
	}
	e.lost = e.want - seen
	return e
}

// replayDigest is one run's live digest against its replay from the input topics.
type replayDigest struct {
	run, live, replay string
	deadLetters       int
	err               error
}

// replayDigests replays the runs in flight at each fault's start and n more spread over the
// soak, and compares each replay's digest with the live rows'.
func (w *fleet) replayDigests(t *testing.T, n int, faultRuns []string) []replayDigest {
	pick := slices.Clone(faultRuns)
	for i := range n {
		pick = append(pick, runID(i*w.h.sh.runs/max(1, n)))
	}
	pick = append(pick, runID(w.h.sh.runs-1))
	slices.Sort(pick)
	pick = slices.Compact(pick)
	cfg := correction.DefaultConfig()
	cfg.MinPairs, cfg.Window = minPairs, window
	var out []replayDigest
	for _, run := range pick {
		w.mu.Lock()
		live := topics.DigestRows(w.rows[run])
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := correct.Replay(ctx, correct.ReplayConfig{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(w.h.kafka.Seeds...)}, Names: w.h.names,
			Run: run, Correction: cfg, Logger: slog.New(slog.DiscardHandler)}, func(int64, []topics.AdvantageRow) error { return nil })
		cancel()
		out = append(out, replayDigest{run: run, live: live, replay: res.Digest, deadLetters: res.DeadLetters, err: err})
	}
	t.Logf("replayed %d runs from the input topics", len(out))
	return out
}
