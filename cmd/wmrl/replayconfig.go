package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
)

// liveConfigHash reads the run's newest calibration snapshots from the calibration topic (the
// live consumer's changelog) and returns the correction config hash they were sealed with, or
// "" when the topic holds none of the run's (nothing sealed yet, or retention dropped them).
// Replays under another config are legitimate experiments (another --map on the same inputs),
// but their digest cannot equal the live one, so the caller says so before replaying.
func liveConfigHash(ctx context.Context, opts []kgo.Opt, names topics.Names, run string, part *int32) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topic := names.Calibration()
	var p int32
	if part != nil {
		p = *part
	} else {
		n, err := topicread.PartitionCount(ctx, opts, topic)
		if err != nil {
			return "", err
		}
		p = topics.PartitionFor(run, n)
	}
	hash := ""
	start := map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}
	err := topicread.ToEnd(ctx, opts, start, 5*time.Second, slog.New(slog.DiscardHandler), func(r *kgo.Record) error {
		if topics.IsCalibrationChunk(r) {
			return nil
		}
		if rr, _, err := topics.ParseCalibrationKey(r.Key); err != nil || rr != run {
			return nil
		}
		if sn, err := topics.DecodeCalibration(r.Value); err == nil {
			hash = sn.ConfigHash // the newest wins: a consumer restarted with --allow-config-change
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read %s[%d]: %w", topic, p, err)
	}
	return hash, nil
}

// checkReplayConfig warns when cfg is not the config the live consumer sealed the run with.
func (o *replayOptions) checkReplayConfig(ctx context.Context, opts []kgo.Opt, names topics.Names, part *int32, cfg correction.Config) {
	live, err := liveConfigHash(ctx, opts, names, o.runID, part)
	if err != nil {
		o.a.log.Warn("could not read the live consumer's correction config; the replay digest may differ from the live one", "err", err)
		return
	}
	h := cfg.Hash()
	if mine := hex.EncodeToString(h[:]); live != "" && live != mine {
		o.a.log.Warn("replaying with another correction config than the live consumer's (--mode, --map, --advantage, --min-pairs, ...): the replay digest will not equal the live one",
			"run", o.runID, "live_config_hash", short(live), "replay_config_hash", short(mine), "map", cfg.Map.String())
	}
}

func short(h string) string { return h[:min(12, len(h))] }
