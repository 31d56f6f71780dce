package correct

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/oversize"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/topics"
)

// DefaultMaxBatchBytes bounds what one fetched record batch of the input topics may decompress to
// (franz-go's MaxDecompressBatchBytes, whose own default is 1 GiB), derived from the record limit
// of the JSON input topics (topics.MaxBatchBytes). A batch over it (a decompression bomb: 135 KB
// of zstd that inflates to 1.26 GB) is dead-lettered by reference and skipped unread, so one
// batch costs at most this much memory.
var DefaultMaxBatchBytes = topics.MaxBatchBytes(topics.MaxRecordBytes)

// skipBatch dead-letters a refused batch by reference (topics.DeadLetterWriter.BatchRecord:
// partition, offset range and limit, no records). Like any dead letter it is held until the
// holdback passes its first offset, so it is written by the transaction whose offset commit
// passes the batch: the client was moved past the batch (SetOffsets), which sets the offset that
// commit carries for the partition. The decision depends only on the batch and Limits.BatchBytes,
// so the live consumer, a restart and a replay skip the same batches.
func (e *engine) skipBatch(ref topics.BatchRef) {
	key := tp{ref.Topic, ref.Partition}
	e.deadLettered++
	e.skippedBatches++
	if k, ok := e.kinds[ref.Topic]; ok {
		e.m.record(k, resultBatchTooLarge)
	}
	if e.fold(key, ref.Offset, topics.ReasonBatchTooLarge) {
		return
	}
	dl := e.dlqw.BatchRecord(ref)
	e.dlq[key] = append(e.dlq[key], deadLetter{off: ref.Offset, rec: dl})
	e.dlqBytes += stage.RecordBytes(dl)
}

// skipBatches dead-letters the refused batches (already skipped by the client's oversize.Skipper)
// of the owned input partitions. It runs after a reload, which forgets held dead letters. A
// partition revoked meanwhile is left to its next owner, which meets the batch itself: the
// offsets of a revoked partition are not committed by this instance.
func (c *Consumer) skipBatches(refs []topics.BatchRef, owned map[int32]bool) {
	for _, ref := range refs {
		if _, input := c.eng.kinds[ref.Topic]; input && owned[ref.Partition] {
			c.eng.skipBatch(ref)
		}
	}
}

// skipper returns the session client's oversize.Skipper, counting on c's series.
func (c *Consumer) skipper(cl *kgo.Client) *oversize.Skipper {
	return oversize.NewSkipper(cl, c.log, c.skipCount, "dead-lettered by reference (batch-too-large) in the transaction that commits past it")
}
