package correct

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/correction/correctiontest"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// TestChangelogRebuildOnBroker writes a changelog to a real broker as the consumer does — first in
// the full-encoding form written before heads and chunks existed (the state's full encoding in
// the snapshot), then (from migrateAt, whose
// records carry every window chunk) version 1 heads with the flat digest and changed chunks, then
// (from chunkedAt) current heads with the chunked digest — and rebuilds every (run, stream) from
// it: the states must be the sealed ones byte for byte, at all three points.
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
	const migrateAt, chunkedAt = 30, 60
	final := map[string]*correction.State{}
	atMigrate := map[string]*correction.State{}
	atChunked := map[string]*correction.State{}
	var deltaBytes, deltaSteps int
	for _, s := range all {
		var recs []*kgo.Record
		switch {
		case s.step < migrateAt:
			c := *s
			c.snaps, c.chunks = slices.Clone(s.snaps), make([][]statestore.Chunk, len(s.snaps))
			for i := range c.snaps {
				c.snaps[i].State = s.states[i].Encode() // the form written before heads existed
				c.snaps[i].Digest = correctiontest.FlatDigest(s.states[i])
			}
			if recs, err = calibrationRecords(names, &c, nil); err != nil {
				t.Fatal(err)
			}
		default:
			c := *s
			if s.step == migrateAt {
				c.chunks = make([][]statestore.Chunk, len(s.snaps))
				for i := range s.snaps {
					c.chunks[i] = statestore.WindowChunks(s.states[i], 0)
				}
			}
			if s.step < chunkedAt {
				// Version 1 heads with the flat digest, as written before the chunked digest.
				c.snaps = slices.Clone(s.snaps)
				for i := range c.snaps {
					c.snaps[i].State = correctiontest.V1Head(c.snaps[i].State)
					c.snaps[i].Digest = correctiontest.FlatDigest(s.states[i])
				}
			}
			if recs, err = calibrationRecords(names, &c, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i, sn := range s.snaps {
			key := string(topics.CalibrationKey(sn.RunID, sn.Stream))
			final[key] = s.states[i]
			if s.step == migrateAt-1 {
				atMigrate[key] = s.states[i]
			}
			if s.step == chunkedAt-1 {
				atChunked[key] = s.states[i]
			}
		}
		if s.step > migrateAt {
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
		if s.step == migrateAt-1 && s.run == "run-1" {
			checkRebuild(t, seeds, names, atMigrate, true)
		}
		if s.step == chunkedAt-1 && s.run == "run-1" {
			checkRebuild(t, seeds, names, atChunked, false)
		}
	}
	if final["run-0/stream0"].Pairs() != cfg.Window {
		t.Fatalf("the window never filled: %d pairs", final["run-0/stream0"].Pairs())
	}
	checkRebuild(t, seeds, names, final, false)
	per := float64(deltaBytes) / float64(deltaSteps)
	t.Logf("changelog bytes (keys and values) per sealed (run, stream) step after the migration: %.0f", per)
	if per > 4096 {
		t.Fatalf("%.0f changelog bytes per (run, stream) step", per)
	}
}

func checkRebuild(t *testing.T, seeds []string, names topics.Names, want map[string]*correction.State, legacy bool) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	log2, err := readChangelog(context.Background(), []kgo.Opt{kgo.SeedBrokers(seeds...)}, names.Calibration(), []int32{0}, 30*time.Second, log)
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
		back, wasLegacy, err := e.stateOf()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if wasLegacy != legacy || !bytes.Equal(back.Encode(), st.Encode()) || back.Digest() != st.Digest() {
			t.Fatalf("%s: rebuilt state differs (legacy %v, want %v)", key, wasLegacy, legacy)
		}
	}
}
