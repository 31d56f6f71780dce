package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
)

// requireTopics is the start-up topic check of commands that are not stages (the stages make
// it in Run): a consumer of a missing topic would otherwise wait for it without a word.
func (a *app) requireTopics(opts []kgo.Opt, need ...string) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	return topicadmin.RequireLayout(a.startupContext(), kadm.NewClient(cl), a.conn.Names(), need)
}

// groupFor is a command's consumer group: --group when given; otherwise base under the default
// topic prefix (the names earlier versions used, so existing deployments keep their committed
// offsets) and "<prefix><base>" under any other, so that the stages of two topic sets never share
// a group, and with it their offsets and partitions, by default.
func (a *app) groupFor(cmd *cobra.Command, group, base string) string {
	if cmd.Flags().Changed("group") {
		return group
	}
	if p := a.conn.TopicPrefix; p != "" && p != topics.DefaultPrefix {
		return p + base
	}
	return base
}
