package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/wmrl/wmrl/sim"
)

// demoHandoff prints the run id and topic prefix of the demo's wmrl arm and a Python snippet
// that reads its advantages, so a trainer can be pointed at the demo's output without reading
// the source. The embedded broker ends with the process, so there the snippet needs --external.
func demoHandoff(w io.Writer, seed int64, topicPrefix string, brokers []string, embedded bool) {
	run := sim.RunID(seed)
	prefix := topicPrefix + sim.ArmWMRL + "."
	fmt.Fprintf(w, "\nrun id %s; the wmrl arm's topic prefix is %s (advantages: %sadvantages.v1)\n", run, prefix, prefix)
	if embedded {
		fmt.Fprintln(w, "the embedded Kafka ended with the demo; to read a demo's topics from Python, run `wmrl demo --external`")
		fmt.Fprintln(w, "(or with --brokers/--redis) on a broker that stays up: it prints this snippet with that run's prefix:")
	} else {
		fmt.Fprintln(w, "read them from Python (pip install ./python):")
	}
	fmt.Fprint(w, pythonSnippet(strings.Join(brokers, ","), run, prefix))
}

func pythonSnippet(brokers, run, prefix string) string {
	return fmt.Sprintf(`
    from wmrl_client import AdvantageStream
    with AdvantageStream(%s, run_id=%s, group_id="py-trainer", topic_prefix=%s, idle_timeout=30) as stream:
        for step in stream:
            print(step.step, step.num_rows, step.to_numpy(["advantage"])["advantage"].mean())
            step.ack()

`, strconv.Quote(brokers), strconv.Quote(run), strconv.Quote(prefix))
}
