package main

import "github.com/spf13/cobra"

func init() { register(newBenchCmd) }

// benchCommands holds the bench subcommands; each benchmark's file appends to it from init, so
// several packages' benchmarks share one parent without editing this file.
var benchCommands []func(*app) *cobra.Command

func newBenchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure stages and algorithms in-process (no cluster needed)",
	}
	for _, f := range benchCommands {
		cmd.AddCommand(f(a))
	}
	return cmd
}
