package trainer

import "strings"

// clientIDBase opens the Kafka client id of every trainer stream, Go's and the Python client's.
const clientIDBase = "wmrl-trainer"

// ClientID is the Kafka client id of a trainer of run (empty: every run): "wmrl-trainer/<run>".
// Describing the group shows every member's client id, so a trainer can tell that its group is
// shared with consumers of other runs; run ids cannot contain '/', so the id splits unambiguously.
func ClientID(run string) string {
	if run == "" {
		return clientIDBase
	}
	return clientIDBase + "/" + run
}

// RunOfClientID is the run a group member with client id id consumes: ("", true) for a trainer
// of every run, ok false for a client that is not a trainer stream.
func RunOfClientID(id string) (run string, ok bool) {
	if id == clientIDBase {
		return "", true
	}
	run, found := strings.CutPrefix(id, clientIDBase+"/")
	return run, found && run != ""
}

// Member returns the stream's consumer group and its member id in the current generation (empty
// before the stream joined).
func (s *Stream) Member() (group, memberID string) {
	id, _ := s.cl.GroupMetadata()
	return s.cfg.Group, id
}

// Topic is the topic the stream consumes.
func (s *Stream) Topic() string { return s.topic }
