package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/topics"
)

// tenantName is the one rule every default identity follows (consumer groups, transactional ids
// and with them correct's static member id, Redis key namespaces): base under the default topic
// prefix, the names earlier versions used, so existing deployments keep their offsets, ACLs and
// Redis keys; "<prefix><base>" under any other, so that two pipelines on one cluster (one topic
// prefix each) never share a group, fence each other's transactions or overwrite each other's
// state by default. docs/stages.md ("Many pipelines on one cluster") states it for users.
func tenantName(topicPrefix, base string) string {
	if topicPrefix == "" || topicPrefix == topics.DefaultPrefix {
		return base
	}
	return topicPrefix + base
}

// identity is a command's identity flag: its value when given on the command line, otherwise
// tenantName of base under the command's topic prefix. Explicit flags always win.
func (a *app) identity(cmd *cobra.Command, flag, value, base string) string {
	if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
		return value
	}
	return tenantName(a.conn.TopicPrefix, base)
}

// groupFor is a command's consumer group (--group), by the rule of tenantName.
func (a *app) groupFor(cmd *cobra.Command, group, base string) string {
	return a.identity(cmd, "group", group, base)
}

// trainerGroupBase is the base of a trainer's default group: one group per run, so that two
// trainers of different runs never split the advantages topic's partitions between them (a run's
// records sit on one partition; in a shared group the other run's trainer may own it and filter
// them out). Without a run the trainer reads every run and keeps the shared name.
func trainerGroupBase(base, run string) string {
	if run == "" {
		return base
	}
	return base + "-" + run
}

// hostTransactionalID is the base of correct's default transactional id: unique per host (or
// pod), stable across restarts.
func hostTransactionalID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return "wmrl-correct-" + h
}

// defaultClientID is the Kafka client id of every command but train (see setClientID).
const defaultClientID = "wmrl"
