package main

import (
	"time"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
)

// stageConfig completes the stage configuration that worldmodel and sandbox share: the flags
// they both have and the connection, after the start-up check of the brokers.
func (a *app) stageConfig(member stage.Config, group, metricsAddr string, grace time.Duration) (stage.Config, error) {
	kopts, err := a.kafkaOpts()
	if err != nil {
		return member, err
	}
	member.Group, member.Names, member.KafkaOpts = group, a.conn.Names(), kopts
	member.MetricsAddr, member.Logger, member.ShutdownGrace = metricsAddr, a.log, grace
	return member, nil
}

// artifactResolver opens the claim-check directory, or returns a nil Resolver (not a nil
// *artifact.Store inside one) when dir is empty, so stages see "no store" as nil.
func artifactResolver(dir string) (artifact.Resolver, error) {
	if dir == "" {
		return nil, nil
	}
	return artifact.NewStore(dir, 0)
}
