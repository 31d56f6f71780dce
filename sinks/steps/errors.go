package steps

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel causes of a *RecordError. Callers branch on them with errors.Is; decoding failures
// keep the topics package's sentinels (topics.ErrMalformed, topics.ErrUnknownSchema,
// topics.ErrBadHeader, topics.ErrConflict) as their cause instead.
var (
	// ErrChunkMismatch marks a chunk that contradicts the chunk set of its step: a different
	// chunk count n, or a second chunk i whose payload differs from the first.
	ErrChunkMismatch = errors.New("chunk set mismatch")
	// ErrStale marks a chunk of a step at or below the last step already delivered for its run
	// that is not a byte-identical duplicate of it; delivering it would break step order.
	ErrStale = errors.New("stale step")
	// ErrAbandoned marks an incomplete step given up on because too many later steps of the same
	// run were complete and waiting behind it (Config.MaxBufferedSteps).
	ErrAbandoned = errors.New("incomplete step abandoned")
	// ErrIncomplete marks steps still incomplete when a bounded read (DigestTopicResult) ended.
	ErrIncomplete = errors.New("incomplete step")
)

// Pos names one record: topic, partition and offset.
type Pos struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String renders "topic/partition@offset".
func (p Pos) String() string {
	return p.Topic + "/" + strconv.FormatInt(int64(p.Partition), 10) + "@" + strconv.FormatInt(p.Offset, 10)
}

// RecordError reports a record the assembler skipped. It names the record so an operator can
// find it with any Kafka tool; the stream goes on with the next record.
type RecordError struct {
	Pos Pos
	// Run and Step are the record's headers as far as they could be read ("" and -1 otherwise).
	Run  string
	Step int64
	Err  error
}

func (e *RecordError) Error() string {
	s := "advantages record " + e.Pos.String()
	switch {
	case e.Run != "" && e.Step >= 0:
		s += fmt.Sprintf(" (run %s step %d)", e.Run, e.Step)
	case e.Run != "":
		s += fmt.Sprintf(" (run %s)", e.Run)
	}
	return s + ": " + e.Err.Error()
}

func (e *RecordError) Unwrap() error { return e.Err }
