package correct

import "github.com/wmrl/wmrl/topics"

// The correction consumer's topology, written once (after goka's graph.go): the input kinds it
// joins per step and the outputs it writes. The group subscription, the lag gauge, the engine's
// topic-to-kind lookup, metrics labels, replay's reads and the startup check all read these
// tables, so an input cannot be added in one place and forgotten in another.

// kind is an input topic of the correction consumer.
type kind uint8

const (
	kindStep kind = iota
	kindPredicted
	kindExecuted
	numKinds
)

// inputEdges names each input kind (its metrics label) and the topic it is read from.
var inputEdges = [numKinds]struct {
	name  string
	topic func(topics.Names) string
}{
	kindStep:      {"steps", topics.Names.Steps},
	kindPredicted: {"predicted", topics.Names.Predicted},
	kindExecuted:  {"executed", topics.Names.Executed},
}

// outputEdges are the topics the consumer writes: rows, the calibration changelog, dead letters.
var outputEdges = []func(topics.Names) string{topics.Names.Advantages, topics.Names.Calibration, topics.Names.DLQ}

func (k kind) String() string { return inputEdges[k].name }

// topic is k's topic under n.
func (k kind) topic(n topics.Names) string { return inputEdges[k].topic(n) }

// inputTopics lists the input topics in kind order.
func inputTopics(n topics.Names) []string {
	out := make([]string, 0, numKinds)
	for k := range numKinds {
		out = append(out, k.topic(n))
	}
	return out
}

// allTopics lists the input topics, then the output topics: what must exist before a start.
func allTopics(n topics.Names) []string {
	out := inputTopics(n)
	for _, t := range outputEdges {
		out = append(out, t(n))
	}
	return out
}
