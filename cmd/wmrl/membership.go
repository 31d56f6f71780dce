package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// stageFlags are the flags of the two per-rollout stages (worldmodel, sandbox): their consumer
// group, metrics address, claim-check directory, shutdown grace and group membership.
type stageFlags struct {
	group, metricsAddr, artifactDir string
	grace                           time.Duration
	member                          stage.Config
}

// add adds the flags of the stage name, whose metrics listen on port by default; graceHelp says
// what the shutdown grace gives the stage's work. The membership options are static membership,
// so a restarted instance takes its partitions back without a rebalance, and the session timeout
// that bounds the pause when an instance dies for good; the failure-share options are those of
// the /healthz/scoring both stages serve.
func (s *stageFlags) add(f *pflag.FlagSet, name, port, graceHelp string) {
	f.StringVar(&s.artifactDir, "artifact-dir", "", "claim-check directory shared with the generator, for artifacts sent by reference")
	f.StringVar(&s.group, "group", "", "consumer group (default wmrl-"+name+"; under a --topic-prefix other than wmrl.: <prefix>wmrl-"+name+")")
	f.StringVar(&s.metricsAddr, "metrics-addr", "127.0.0.1:"+port, "serve /metrics and /healthz here (:"+port+" for every interface; empty: off)")
	f.DurationVar(&s.grace, "shutdown-grace", 30*time.Second, graceHelp)
	cfg := &s.member
	f.Float64Var(&cfg.MaxFailureShare, "max-failure-share", health.DefaultMaxFailureShare,
		"/healthz/scoring answers 503 while the share of failed results (scoring or execution failures) among the last --failure-window is above this (above 1: never)")
	f.IntVar(&cfg.FailureWindow, "failure-window", health.DefaultFailureWindow, "how many recent results --max-failure-share is taken over")
	f.StringVar(&cfg.InstanceID, "instance-id", "", "static group member id, stable per instance (e.g. the pod name of a StatefulSet); empty: dynamic membership")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "how long the group waits for a silent member before reassigning its partitions (0: 45s)")
}

// stageRunner is a stage as a command runs it.
type stageRunner interface{ Run(context.Context) error }

// run makes the stage name with newStage, from its configuration (see config) and the claim-check
// store of --artifact-dir (a nil Resolver without one, not a nil *artifact.Store inside one, so
// stages see "no store" as nil), and runs it until SIGTERM or SIGINT.
func (s *stageFlags) run(a *app, cmd *cobra.Command, name string,
	newStage func(stage.Config, artifact.Resolver) (stageRunner, error)) error {
	var artifacts artifact.Resolver
	if s.artifactDir != "" {
		store, err := artifact.NewStore(s.artifactDir, 0)
		if err != nil {
			return err
		}
		artifacts = store
	}
	member, err := s.config(a, cmd, name)
	if err != nil {
		return err
	}
	st, err := newStage(member, artifacts)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return st.Run(ctx)
}

// config completes the configuration of the stage name from the flags and the connection,
// after the start-up check of the brokers.
func (s *stageFlags) config(a *app, cmd *cobra.Command, name string) (stage.Config, error) {
	member := s.member
	kopts, err := a.kafkaOpts()
	if err != nil {
		return member, err
	}
	if err := a.useRegistry(); err != nil {
		return member, err
	}
	member.Group, member.Names, member.KafkaOpts = a.groupFor(cmd, s.group, "wmrl-"+name), a.conn.Names(), kopts
	member.MetricsAddr, member.Logger, member.ShutdownGrace = s.metricsAddr, a.log, s.grace
	member.StartupTimeout = a.startupLeft()
	member.MaxBatchBytes = a.conn.BatchLimit(topics.MaxRecordBytes)
	return member, nil
}
