package main

import (
	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/internal/stage"
)

// memberFlags adds the group-membership options of a consuming stage: static membership, so a
// restarted instance takes its partitions back without a rebalance, and the session timeout
// that bounds the pause when an instance dies for good. It also adds the failure-share options of
// /healthz/scoring, which both stages that take these flags (worldmodel, sandbox) serve.
func memberFlags(f *pflag.FlagSet, cfg *stage.Config) {
	f.Float64Var(&cfg.MaxFailureShare, "max-failure-share", health.DefaultMaxFailureShare,
		"/healthz/scoring answers 503 while the share of failed results (scoring or execution failures) among the last --failure-window is above this (above 1: never)")
	f.IntVar(&cfg.FailureWindow, "failure-window", health.DefaultFailureWindow, "how many recent results --max-failure-share is taken over")
	f.StringVar(&cfg.InstanceID, "instance-id", "", "static group member id, stable per instance (e.g. the pod name of a StatefulSet); empty: dynamic membership")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "how long the group waits for a silent member before reassigning its partitions (0: 45s)")
}
