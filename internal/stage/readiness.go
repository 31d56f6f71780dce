package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/health"
)

// readiness is what /readyz reports: the stage runs, its cluster answered recently and it holds
// partitions. Assignment comes from the group callbacks, the cluster from watch's pings.
type readiness struct {
	mu        sync.Mutex
	parts     map[tp]bool
	clusterOK bool
	lastErr   error
}

func (r *readiness) assigned(a map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts == nil {
		r.parts = map[tp]bool{}
	}
	for t, ps := range a {
		for _, p := range ps {
			r.parts[tp{t, p}] = true
		}
	}
}

func (r *readiness) revoked(a map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range a {
		for _, p := range ps {
			delete(r.parts, tp{t, p})
		}
	}
}

func (r *readiness) cluster(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clusterOK, r.lastErr = err == nil, err
}

func (r *readiness) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.clusterOK {
		if r.lastErr != nil {
			return fmt.Errorf("kafka unreachable: %w", r.lastErr)
		}
		return errors.New("kafka not reached yet")
	}
	if len(r.parts) == 0 {
		return errors.New("no partitions assigned")
	}
	return nil
}

// Ready is the /readyz check: nil while the stage runs, reached its cluster within the last
// ping interval and holds at least one partition. An idle member of an over-provisioned group
// is therefore not ready, which is what a load balancer or a rollout should see.
func (s *Stage) Ready() error {
	if err := s.live(); err != nil {
		return err
	}
	return s.ready.check()
}

// watch pings the cluster and refreshes the consumer-lag gauge until ctx ends.
func (s *Stage) watch(ctx context.Context) {
	adm := kadm.NewClient(s.cl)
	health.Watch(ctx, s.cl, func(pctx context.Context, err error) {
		s.ready.cluster(err)
		if err == nil {
			RefreshLag(pctx, adm, s.cfg.Group, s.cfg.Topics, s.metrics.lag)
		}
	})
}

// leaveStatic removes a static member from its group on a graceful stop. A static member's
// LeaveGroup is a no-op in franz-go (so that a restart keeps its partitions), which would leave
// its partitions idle for the session timeout when the instance is scaled in; on a deliberate
// stop an explicit leave by instance id hands them over at once. A crash (SIGKILL) skips this,
// and the restarted instance takes its partitions back without a rebalance.
func (s *Stage) leaveStatic(ctx context.Context) {
	LeaveStatic(ctx, s.cl, s.cfg.Group, s.cfg.InstanceID, s.log)
}

// LeaveStatic makes the static member instanceID leave group at once (see Stage.leaveStatic);
// the correction consumer uses it too.
func LeaveStatic(ctx context.Context, cl *kgo.Client, group, instanceID string, log *slog.Logger) {
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceID))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		log.Warn("leave group as static member", "instance_id", instanceID, "err", err)
		return
	}
	log.Info("left group as static member", "instance_id", instanceID)
}
