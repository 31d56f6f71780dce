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
