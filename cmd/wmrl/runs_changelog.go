package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// Redis is a cache of the calibration changelog: after Redis restarts empty, `wmrl correct`
// rewrites an active run's state at its next sealed step, but nothing rewrites an ended or idle
// run's (a reassignment restores only their end records). `runs list` therefore also reads the
// changelog and lists the runs Redis no longer holds from it: their last snapshot per stream
// and their end record, marked as read from the changelog.

// changelogRuns reads the calibration topic to its end and returns a summary of every run it
// holds (latest snapshot per stream, end record), keyed by run id.
func changelogRuns(ctx context.Context, opts []kgo.Opt, topic string) (map[string]*statestore.RunSummary, error) {
	n, err := topicread.PartitionCount(ctx, opts, topic)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", topic, err)
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range int32(n) {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	heads := map[[2]string]*statestore.Head{}
	ends := map[string]*statestore.RunEnd{}
	err = topicread.ToEnd(ctx, opts, start, 0, nil, func(r *kgo.Record) error {
		key := string(r.Key)
		switch parts := strings.Split(key, "/"); {
		case r.Value == nil && len(parts) == 1:
			delete(ends, key)
		case r.Value == nil && len(parts) == 2:
			delete(heads, [2]string{parts[0], parts[1]})
		case r.Value == nil, topics.IsCalibrationChunk(r):
		case topics.IsCalibrationEnd(r):
			e, err := topics.DecodeCalibrationEndRecord(r)
			if err != nil {
				return fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			ends[e.RunID] = &statestore.RunEnd{LastStep: e.LastStep, EndedAt: e.EndedAt, Reason: e.Reason}
		default:
			s, err := topics.DecodeCalibrationRecord(r)
			if err != nil {
				return fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			k := [2]string{s.RunID, s.Stream}
			if h := heads[k]; h == nil || s.Step >= h.SealedStep {
				heads[k] = &statestore.Head{SealedStep: s.Step, Digest: s.Digest, ConfigHash: s.ConfigHash, FitVersion: s.FitVersion, AnchorWeight: s.AnchorWeight, Pairs: s.Pairs}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	out := map[string]*statestore.RunSummary{}
	run := func(id string) *statestore.RunSummary {
		if out[id] == nil {
			out[id] = &statestore.RunSummary{Run: id, TTL: statestore.NoExpiry}
		}
		return out[id]
	}
	for _, k := range slices.SortedFunc(maps.Keys(heads), func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) }) {
		s := run(k[0])
		s.Streams = append(s.Streams, statestore.StreamSummary{Stream: k[1], Head: heads[k], TTL: statestore.NoExpiry})
	}
	for id, e := range ends {
		run(id).End = e
	}
	return out, nil
}

// mergeChangelog adds to sums (Redis's runs) the changelog's runs Redis holds nothing of, in run
// order, and returns which runs came from the changelog.
func mergeChangelog(sums []statestore.RunSummary, fromLog map[string]*statestore.RunSummary) ([]statestore.RunSummary, map[string]bool) {
	inRedis := map[string]bool{}
	for _, s := range sums {
		inRedis[s.Run] = true
	}
	only := map[string]bool{}
	for id, s := range fromLog {
		if !inRedis[id] {
			sums = append(sums, *s)
			only[id] = true
		}
	}
	slices.SortFunc(sums, func(a, b statestore.RunSummary) int { return strings.Compare(a.Run, b.Run) })
	return sums, only
}

// changelogTimeout bounds the changelog read of `runs list` within its --timeout.
const changelogTimeout = 30 * time.Second
