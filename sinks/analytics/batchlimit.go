package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"github.com/wmrl/wmrl/topics"
)

// kafka-go decompresses a record batch whole into a bytes.Buffer (message_reader.go, and
// protocol/record_v2.go for the filter's fetches), with no option to bound it: a 135 KB zstd batch
// of 1.26 GB of records costs more than 1.26 GB. The tap therefore wraps the codecs of kafka-go's
// global table (compress.Codecs, which both paths resolve through) in a reader that fails with
// topics.ErrBatchTooLarge past batchLimit bytes, so one batch costs at most about twice the limit
// (the buffer's doubling). kafka-go's Reader then logs the error for the partition and fetches the
// same batch again; the tap sees that log line (refusalLogger), finds the batch's end and moves
// past it (Tap.skipBatch). The table is process-wide: the limit is the largest any tap asked for.

var (
	batchLimit  atomic.Int64
	installOnce sync.Once
)

// limitBatches bounds kafka-go's decompression at limit bytes a batch (see above).
func limitBatches(limit int) {
	for {
		cur := batchLimit.Load()
		if int64(limit) <= cur || batchLimit.CompareAndSwap(cur, int64(limit)) {
			break
		}
	}
	installOnce.Do(func() {
		for i, c := range compress.Codecs {
			if c != nil {
				compress.Codecs[i] = limitedCodec{c}
			}
		}
	})
}

type limitedCodec struct{ compress.Codec }

func (c limitedCodec) NewReader(r io.Reader) io.ReadCloser {
	return &limitedReader{ReadCloser: c.Codec.NewReader(r), left: batchLimit.Load()}
}

// limitedReader fails once more than its limit was read: one byte past the limit is asked for, so
// a batch of exactly the limit passes.
type limitedReader struct {
	io.ReadCloser
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, topics.ErrBatchTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.ReadCloser.Read(p)
	if l.left -= int64(n); l.left < 0 {
		return n, fmt.Errorf("kafka-go %w of %d bytes", topics.ErrBatchTooLarge, batchLimit.Load())
	}
	return n, err
}

// refusal is where kafka-go's Reader met a batch past the limit: the offset it fetched from.
type refusal struct {
	topic     string
	partition int
	offset    int64
}

// refusalLogger is the Reader's ErrorLogger: kafka-go reports a fetch error that is not a Kafka
// error code only there, as "... partition %d of %s at offset %d: %s" (reader.go), so a refused
// batch is recognised by its error among the arguments and handed to found.
func refusalLogger(log func(string), found func(refusal)) kafka.LoggerFunc {
	return func(msg string, args ...any) {
		for _, a := range args {
			if err, ok := a.(error); ok && errors.Is(err, topics.ErrBatchTooLarge) && len(args) == 4 {
				p, pok := args[0].(int)
				topic, tok := args[1].(string)
				var off int64
				if _, err := fmt.Sscan(fmt.Sprint(args[2]), &off); pok && tok && err == nil {
					found(refusal{topic: topic, partition: p, offset: off})
					return
				}
			}
		}
		log(fmt.Sprintf(msg, args...))
	}
}

// errRefused cancels a FetchMessage blocked while kafka-go fetches a refused batch again.
var errRefused = errors.New("analytics: record batch refused")

// batchEnd finds the offset after the refused batch that holds from: a fetch from an offset inside
// the batch meets the refusal again, one from past it does not (kafka-go names no batch bounds
// without decompressing). log2(records) fetches, each decompressing at most the limit.
func (f *txnFilter) batchEnd(ctx context.Context, topic string, partition int, from, high int64) (int64, error) {
	inside := func(x int64) (bool, error) {
		ps := &partScan{low: x, scanned: x}
		err := f.scan(ctx, topic, partition, ps)
		if errors.Is(err, topics.ErrBatchTooLarge) {
			return true, nil
		}
		return false, err
	}
	if in, err := inside(from); err != nil || !in {
		return 0, fmt.Errorf("%s/%d@%d: the refused batch is not there on a second fetch: %w", topic, partition, from, err)
	}
	lo, hi := from+1, max(high, from+1)
	for lo < hi {
		mid := lo + (hi-lo)/2
		in, err := inside(mid)
		if err != nil {
			return 0, err
		}
		if in {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// skipTo restarts classification of a partition at offset end, past a refused batch.
func (f *txnFilter) skipTo(topic string, partition int, end int64) {
	f.parts[partKey{topic, partition}] = &partScan{low: end, scanned: end}
}
