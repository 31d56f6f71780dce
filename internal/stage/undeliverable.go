package stage

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Undeliverable reports whether a produce failed in a way no retry can fix: the record itself is
// refused (too large for the client's batch limit or the topic's max.message.bytes, invalid,
// rejected by a broker policy). A stage that stopped, or aborted and re-read, on such an error
// would fail on the same input for ever, so callers turn the input into a dead letter or, when
// the dead letter itself is refused, skip the input with an error metric and log line.
func Undeliverable(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.PolicyViolation)
}
