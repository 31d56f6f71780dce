package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CommitOffsets commits offsets for cl's group and waits for the answer. A commit can fail per
// partition while the request succeeds, so the error joins each refused partition's (topic/partition:
// error) and says nothing of the accepted ones.
func CommitOffsets(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var cerr error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					cerr = errors.Join(cerr, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err))
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("commit offsets: %w", cerr)
	}
	return nil
}

func (s *Stage) commitLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.commit(ctx, nil); err != nil && ctx.Err() == nil {
				s.log.Warn("commit failed; will retry", "err", err)
			}
		}
	}
}

// commit commits the committable offsets of the given partitions (all when nil).
func (s *Stage) commit(ctx context.Context, only map[string][]int32) error {
	c := s.track.committable(only)
	if len(c) == 0 {
		return nil
	}
	offsets := make(map[string]map[int32]kgo.EpochOffset, len(c))
	for t, ps := range c {
		offsets[t] = make(map[int32]kgo.EpochOffset, len(ps))
		for p, at := range ps {
			offsets[t][p] = kgo.EpochOffset{Epoch: at.epoch, Offset: at.offset}
		}
	}
	if cerr := CommitOffsets(ctx, s.cl, offsets); cerr != nil {
		s.metrics.commitErrors.Inc()
		return cerr
	}
	s.track.committedAt(c)
	return nil
}

// onRevoked lets in-flight records of revoked partitions finish (bounded by ShutdownGrace) and
// commits them before the partitions move, so the new owner does not redo finished work.
func (s *Stage) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.log.Info("partitions revoked", "partitions", revoked)
	deadline := time.Now().Add(s.cfg.ShutdownGrace)
	timer := time.AfterFunc(s.cfg.ShutdownGrace, s.track.wake)
	s.track.waitIdle(revoked, func() bool { return time.Now().After(deadline) })
	timer.Stop()
	if err := s.commit(ctx, revoked); err != nil {
		s.log.Warn("commit on revoke failed", "err", err)
	}
	s.track.revoke(revoked)
	s.ready.revoked(revoked)
}
