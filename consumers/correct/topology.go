package correct

import "github.com/wmrl/wmrl/topics"

// The correction consumer's inputs, written once (after goka's graph.go): the kinds of record it
// joins per step and their topics. The group subscription, the lag gauge, the engine's
// topic-to-kind lookup, metrics labels, replay's reads and the startup check all read this
// table, so an input cannot be added in one place and forgotten in another.

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
