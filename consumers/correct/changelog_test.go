package correct

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// TestChangelogRebuildOnBroker writes a changelog to a real broker as the consumer does (heads and
// changed chunks; a stream's first step writes its whole window) and rebuilds every (run, stream)
// from it: the states must be the sealed ones byte for byte, midway and at the end. A snapshot
// holding another form of the state (the full encoding) is refused.
func TestChangelogRebuildOnBroker(t *testing.T) {
	seeds := testenv.Kafka(t)
	names := topics.NewNames(testenv.Name(t) + ".")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(names.Calibration()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	brokerTopics(t, seeds, names)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := correction.DefaultConfig()
	cfg.Window, cfg.MinPairs = 300, 20
	wl := SynthConfig{Runs: 2, Steps: 90, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, FailEvery: 50, Seed: 3}
	f := newFeeder(testEngine(t, cfg))
	f.add(flatten(synth(t, wl))...)
	all := f.seal(t)
	if len(all) != wl.Runs*wl.Steps {
		t.Fatalf("sealed %d steps", len(all))
	}
	// Steps in time order, as one consumer of both runs would produce them.
	slices.SortStableFunc(all, func(a, b *sealed) int { return cmp.Compare(a.step, b.step) })
	const midway, measureFrom = 45, 30
	final := map[string]*correction.State{}
	atMidway := map[string]*correction.State{}
	var deltaBytes, deltaSteps int
	for _, s := range all {
		recs, err := calibrationRecords(names, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, sn := range s.snaps {
			key := string(topics.CalibrationKey(sn.RunID, sn.Stream))
			final[key] = s.states[i]
			if s.step == midway {
				atMidway[key] = s.states[i]
			}
		}
		if s.step > measureFrom {
			deltaSteps += len(s.snaps)
			for _, r := range recs {
				deltaBytes += len(r.Key) + len(r.Value)
			}
		}
		for _, r := range recs {
			r.Partition = 0
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if s.step == midway && s.run == "run-1" {
			checkRebuild(t, seeds, names, atMidway)
		}
	}
	if final["run-0/stream0"].Pairs() != cfg.Window {
		t.Fatalf("the window never filled: %d pairs", final["run-0/stream0"].Pairs())
	}
	got := checkRebuild(t, seeds, names, final)
	per := float64(deltaBytes) / float64(deltaSteps)
	t.Logf("changelog bytes (keys and values) per sealed (run, stream) step after step %d: %.0f", measureFrom, per)
	if per > 4096 {
		t.Fatalf("%.0f changelog bytes per (run, stream) step", per)
	}
	e := got["run-0/stream0"]
	e.snap.State = final["run-0/stream0"].Encode()
	if _, err := e.stateOf(); !errors.Is(err, ErrChangelog) || !errors.Is(err, correction.ErrBadMagic) {
		t.Fatalf("a snapshot holding the full encoding: %v", err)
	}
}

// checkRebuild reads the changelog and checks that it rebuilds exactly the states in want; it
// returns what it read.
func checkRebuild(t *testing.T, seeds []string, names topics.Names, want map[string]*correction.State) map[string]*changelogState {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	log2, err := readChangelog(context.Background(), []kgo.Opt{kgo.SeedBrokers(seeds...)}, names, []int32{0}, 30*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	got := log2.states
	if len(got) != len(want) {
		t.Fatalf("changelog holds %d (run, stream)s, want %d", len(got), len(want))
	}
	for key, st := range want {
		e := got[key]
		if e == nil {
			t.Fatalf("%s missing from the changelog", key)
		}
		back, err := e.stateOf()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if !bytes.Equal(back.Encode(), st.Encode()) || back.Digest() != st.Digest() {
			t.Fatalf("%s: rebuilt state differs", key)
		}
	}
	return got
}
