package testenv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A decompression bomb is one record batch that is small on the wire and huge once decompressed:
// the broker checks max.message.bytes on the compressed batch, so any principal allowed to write
// a topic can put one there. It is hand-built here (kmsg.RecordBatch around a zstd stream of
// highly compressible records, sent as a raw ProduceRequest) because a producing client would
// split the records into batches of at most ProducerBatchMaxBytes uncompressed.

// BombRecordBytes is the value size of each record in a bomb batch (the last one may be smaller).
const BombRecordBytes = 1 << 20

// bombWindowBytes is the zstd window: the broker decompresses batches to validate them, and its
// decoder refuses windows over 2^27 bytes (UNKNOWN_SERVER_ERROR), so the bomb stays well under.
const bombWindowBytes = 8 << 20

// BombRef locates a bomb batch a test wrote.
type BombRef struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// BaseOffset is the batch's first offset; NextOffset is the offset after its last record,
	// where a consumer that skips the batch resumes.
	BaseOffset int64 `json:"base_offset"`
	NextOffset int64 `json:"next_offset"`
	// Records is the number of records in the batch.
	Records int `json:"records"`
	// CompressedBytes is the size of the zstd stream on the wire; DecompressedBytes the size of the
	// records it decompresses to.
	CompressedBytes   int `json:"compressed_bytes"`
	DecompressedBytes int `json:"decompressed_bytes"`
}

// ErrBombRefused is returned when the broker refuses the bomb batch.
var ErrBombRefused = errors.New("testenv: broker refused the bomb batch")

// ProduceBomb writes one zstd record batch to topic/partition whose records decompress to at
// least decompressedBytes (records of BombRecordBytes of one repeated byte), with acks=all, and
// returns where it landed. cl must use the default RequiredAcks (all), as kgo rewrites a raw
// request's acks to the client's.
//
// The zstd frame does not declare its content size, as a streaming encoder writes it: a decoder
// cannot refuse it from the header and must decompress up to its bound, the worst case for a
// consumer. Building the batch streams the records through the encoder, so the test process
// holds only the compressed bytes and one record.
func ProduceBomb(ctx context.Context, cl *kgo.Client, topic string, partition int32, decompressedBytes int) (BombRef, error) {
	ref := BombRef{Topic: topic, Partition: partition}
	if decompressedBytes <= 0 {
		return ref, fmt.Errorf("testenv: bomb of %d decompressed bytes: must be positive", decompressedBytes)
	}
	compressed, nrec, raw, err := bombRecords(decompressedBytes)
	if err != nil {
		return ref, err
	}
	ref.Records, ref.CompressedBytes, ref.DecompressedBytes = nrec, len(compressed), raw

	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return ref, fmt.Errorf("testenv: bomb: metadata for %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return ref, fmt.Errorf("testenv: bomb: topic %s: not in metadata: %v", topic, td.Err)
	}

	now := time.Now().UnixMilli()
	batch := kmsg.RecordBatch{
		FirstOffset:          0,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(kgo.CodecZstd),
		LastOffsetDelta:      int32(nrec - 1),
		FirstTimestamp:       now,
		MaxTimestamp:         now,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(nrec),
		Records:              compressed,
	}
	wire := batch.AppendTo(nil)
	// Length counts the bytes after itself (FirstOffset int64 + Length int32 precede them); the
	// CRC-32C covers everything from Attributes (after the 4-byte CRC at offset 17) to the end.
	binary.BigEndian.PutUint32(wire[8:], uint32(len(wire)-12))
	binary.BigEndian.PutUint32(wire[17:], crc32.Checksum(wire[21:], crc32.MakeTable(crc32.Castagnoli)))

	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 60_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, td.ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, wire
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return ref, fmt.Errorf("testenv: bomb: produce to %s/%d: %w", topic, partition, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return ref, fmt.Errorf("testenv: bomb: produce to %s/%d: malformed response: %w", topic, partition, ErrBombRefused)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		msg := ""
		if p.ErrorMessage != nil {
			msg = *p.ErrorMessage
		}
		return ref, fmt.Errorf("testenv: bomb: produce %d compressed bytes to %s/%d: %w: %w %s", len(compressed), topic, partition, ErrBombRefused, err, msg)
	}
	ref.BaseOffset = p.BaseOffset
	ref.NextOffset = p.BaseOffset + int64(nrec)
	return ref, nil
}

// Bomb is ProduceBomb for tests: a client on seeds, failing the test on any error.
func Bomb(t testing.TB, seeds []string, topic string, partition int32, decompressedBytes int) BombRef {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref, err := ProduceBomb(ctx, cl, topic, partition, decompressedBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bomb on %s/%d: offsets [%d, %d), %d records, %d bytes compressed, %d decompressed",
		topic, partition, ref.BaseOffset, ref.NextOffset, ref.Records, ref.CompressedBytes, ref.DecompressedBytes)
	return ref
}

// bombRecords streams records of BombRecordBytes through a zstd encoder until at least n bytes of
// serialized records went in; it returns the compressed stream, the record count and the
// uncompressed size.
func bombRecords(n int) (compressed []byte, nrec, raw int, err error) {
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out,
		zstd.WithEncoderLevel(zstd.SpeedBestCompression),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(bombWindowBytes))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("testenv: bomb: zstd writer: %w", err)
	}
	value := make([]byte, BombRecordBytes)
	for i := range value {
		value[i] = 'x'
	}
	var buf []byte
	for raw < n {
		v := value[:min(BombRecordBytes, max(n-raw, 1))]
		r := kmsg.Record{OffsetDelta: int32(nrec), Value: v}
		buf = r.AppendTo(buf[:0]) // Length 0 is one varint byte; the body follows.
		r.Length = int32(len(buf) - 1)
		buf = r.AppendTo(buf[:0])
		if _, err := enc.Write(buf); err != nil {
			return nil, 0, 0, fmt.Errorf("testenv: bomb: compress: %w", err)
		}
		raw += len(buf)
		nrec++
	}
	if err := enc.Close(); err != nil {
		return nil, 0, 0, fmt.Errorf("testenv: bomb: compress: %w", err)
	}
	return out.Bytes(), nrec, raw, nil
}
