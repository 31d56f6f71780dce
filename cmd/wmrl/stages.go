package main

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicadmin"
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
