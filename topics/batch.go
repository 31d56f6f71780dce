package topics

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReasonBatchTooLarge is the wmrl-dlq-reason of a dead letter that references a record batch a
// reader refused because it decompresses past the reader's limit (see MaxBatchBytes).
const ReasonBatchTooLarge = "batch-too-large"

// ErrBatchTooLarge marks a record batch that decompresses past the reader's limit: a
// decompression bomb, or a producer configured with batches far larger than wmrl's records need.
var ErrBatchTooLarge = errors.New("record batch decompresses past the limit")

// MinBatchBytes is the least MaxBatchBytes returns: eight times the default producer batch of
// franz-go, librdkafka and the Java client's max.request.size (about 1 MB uncompressed), so a
// producer tuned for larger batches still gets through.
const MinBatchBytes = 8 << 20

// MaxBatchBytes is the decompressed size above which a reader whose largest valid record is
// recordLimit bytes (MaxRecordBytes for the JSON topics, MaxAdvantageBytes for advantages)
// refuses a record batch (franz-go's MaxDecompressBatchBytes). A valid batch is one producer
// batch, or one record a producer sent alone because it is larger than its batch size, so twice
// the larger of the two bounds every batch wmrl or a standard client writes; anything above is
// refused before it is decompressed in full, which bounds what one batch costs the reader.
// `--max-batch-bytes` overrides it per stage (conn.Options.BatchLimit).
func MaxBatchBytes(recordLimit int) int { return max(2*recordLimit, MinBatchBytes) }

// BatchRef names a record batch a reader refused without reading its records: the partition, the
// offset range [Offset, NextOffset), the batch's leader epoch (for committing past it), its
// compressed size when known (0: unknown) and the limit it broke.
type BatchRef struct {
	Topic           string
	Partition       int32
	Offset          int64
	NextOffset      int64
	Epoch           int32
	CompressedBytes int
	Limit           int
}

// BatchRefOf describes the batch franz-go refused with e, read with limit limit.
func BatchRefOf(e *kgo.ErrDecompressTooLarge, limit int) BatchRef {
	return BatchRef{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, NextOffset: e.NextOffset, Epoch: e.Epoch, Limit: limit}
}

// BatchTooLargeError is the error of a refused batch: it unwraps to ErrBatchTooLarge and its DLQ
// reason is ReasonBatchTooLarge.
type BatchTooLargeError struct{ Ref BatchRef }

func (e *BatchTooLargeError) Error() string {
	r := e.Ref
	s := fmt.Sprintf("%s/%d offsets %d..%d: %v of %d bytes", r.Topic, r.Partition, r.Offset, r.NextOffset-1, ErrBatchTooLarge, r.Limit)
	if r.CompressedBytes > 0 {
		s += fmt.Sprintf(" (%d bytes compressed)", r.CompressedBytes)
	}
	return s
}

func (e *BatchTooLargeError) Unwrap() error   { return ErrBatchTooLarge }
func (*BatchTooLargeError) DLQReason() string { return ReasonBatchTooLarge }

// BatchRecord returns the dead letter that references ref: no key, no value (the records are not
// read, that is the point), the DLQ headers of Record with the batch's first offset as the source
// offset and 0 as the source timestamp (unknown), then HeaderDLQEndOffset (NextOffset),
// HeaderDLQLimitBytes and, when known, HeaderDLQCompressedBytes. A batch decompressing past a
// reader's limit is the reader's bound, not the DLQ's, so this record is always small.
func (w *DeadLetterWriter) BatchRecord(ref BatchRef) *kgo.Record {
	err := &BatchTooLargeError{Ref: ref}
	hs := []kgo.RecordHeader{
		Header(HeaderDLQReason, ReasonBatchTooLarge),
		Header(HeaderDLQError, truncateUTF8(err.Error(), MaxDLQErrorLen)),
		Header(HeaderDLQStage, w.stage),
		Header(HeaderDLQTopic, ref.Topic),
		Header(HeaderDLQPartition, strconv.FormatInt(int64(ref.Partition), 10)),
		Header(HeaderDLQOffset, strconv.FormatInt(ref.Offset, 10)),
		Header(HeaderDLQSourceTimestamp, "0"),
		Header(HeaderDLQEndOffset, strconv.FormatInt(ref.NextOffset, 10)),
		Header(HeaderDLQLimitBytes, strconv.Itoa(ref.Limit)),
	}
	if ref.CompressedBytes > 0 {
		hs = append(hs, Header(HeaderDLQCompressedBytes, strconv.Itoa(ref.CompressedBytes)))
	}
	return &kgo.Record{Topic: w.names.DLQ(), Headers: hs}
}
