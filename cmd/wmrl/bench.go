package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func init() { register(newBenchCmd) }

// benchCommands holds the bench subcommands; each benchmark's file appends to it from init, so
// several packages' benchmarks share one parent without editing this file.
var benchCommands []func(*app) *cobra.Command

func newBenchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use: "bench",
		Example: `  wmrl bench correction --embedded --steps 200
  wmrl bench worldmodel --records 2000 --concurrency 32
  wmrl bench sandbox --records 500 --slots 4`,
		Short: "Measure stages and algorithms in-process (no cluster needed)",
	}
	for _, f := range benchCommands {
		cmd.AddCommand(f(a))
	}
	return cmd
}

// belowTarget is a benchmark's verdict: exit status 1, naming the measure, when it missed its
// target.
func belowTarget(measure string, got, target float64) error {
	if got < target {
		return &exitError{code: 1, err: fmt.Errorf("%s %.3f below target %.2f", measure, got, target)}
	}
	return nil
}
