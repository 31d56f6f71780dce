package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// TestGroupFor: default consumer groups carry a non-default topic prefix, so two topic sets'
// stages never share a group; the default prefix keeps the old names, and --group always wins.
func TestGroupFor(t *testing.T) {
	tests := []struct {
		prefix string
		args   []string
		want   string
	}{
		{"", nil, "wmrl-correct"},
		{"wmrl.", nil, "wmrl-correct"},
		{"lab.", nil, "lab.wmrl-correct"},
		{"lab.", []string{"--group", "wmrl-correct"}, "wmrl-correct"},
		{"wmrl.", []string{"--group", "mine"}, "mine"},
	}
	for _, tt := range tests {
		t.Run(tt.prefix+" "+tt.want, func(t *testing.T) {
			a := &app{}
			a.conn.TopicPrefix = tt.prefix
			var group string
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			cmd.Flags().StringVar(&group, "group", "wmrl-correct", "")
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			if got := a.groupFor(cmd, group, "wmrl-correct"); got != tt.want {
				t.Errorf("groupFor = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestIdentityDefaults: every default identity follows tenantName (the topic prefix, and the run
// for a trainer's group), and an explicit flag always wins, even when it names the default.
func TestIdentityDefaults(t *testing.T) {
	host := hostTransactionalID()
	tests := []struct {
		name, prefix, flag, base string
		args                     []string
		want                     string
	}{
		{"txn default prefix", "wmrl.", "transactional-id", host, nil, host},
		{"txn other prefix", "lab.", "transactional-id", host, nil, "lab." + host},
		{"txn explicit", "lab.", "transactional-id", host, []string{"--transactional-id", host}, host},
		{"redis default prefix", "", "redis-prefix", "wmrl", nil, "wmrl"},
		{"redis other prefix", "lab.", "redis-prefix", "wmrl", nil, "lab.wmrl"},
		{"redis explicit", "lab.", "redis-prefix", "wmrl", []string{"--redis-prefix", "mine"}, "mine"},
		{"trainer of a run", "wmrl.", "group", trainerGroupBase("wmrl-trainer", "r1"), nil, "wmrl-trainer-r1"},
		{"trainer of a run, other prefix", "lab.", "group", trainerGroupBase("wmrl-trainer", "r1"), nil, "lab.wmrl-trainer-r1"},
		{"trainer of every run", "wmrl.", "group", trainerGroupBase("wmrl-trainer", ""), nil, "wmrl-trainer"},
		{"trainer explicit", "lab.", "group", trainerGroupBase("wmrl-trainer", "r1"), []string{"--group", "wmrl-trainer"}, "wmrl-trainer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &app{}
			a.conn.TopicPrefix = tt.prefix
			var value string
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			cmd.Flags().StringVar(&value, tt.flag, tt.base, "")
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			if got := a.identity(cmd, tt.flag, value, tt.base); got != tt.want {
				t.Errorf("identity = %q, want %q", got, tt.want)
			}
		})
	}
}
