// Command wmrl runs the WMRL reward-correction pipeline on Kafka: every stage, the demo, and the
// operational tools (topics, replay, digest, bench) are subcommands of this one binary.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}
