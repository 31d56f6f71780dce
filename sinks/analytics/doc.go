// Package analytics is an analytics tap on the advantages and calibration topics: a plain
// segmentio/kafka-go consumer (its own group, read_committed) that writes Parquet files rolled
// every N steps per run, and commits offsets only after the file holding those records is on disk
// (written to a temporary name, fsynced, renamed, directory fsynced). It shows that any Kafka
// client can consume wmrl's output, and gives notebooks columnar files to read.
//
// kafka-go's Reader sends read_committed to the broker (so open transactions stay invisible) but
// does not filter aborted transactions or hide commit/abort markers (segmentio/kafka-go#1332).
// The tap therefore classifies offsets itself with kafka-go's protocol-level fetch, which exposes
// record-batch producer ids, control batches and the broker's aborted-transaction list, and drops
// what a Java read_committed consumer would drop (see txnFilter).
//
// One tap per consumer group is supported. kafka-go's Reader has no revoke callback and does not
// expose the assignment, so a tap sharing its group would keep holds for partitions it lost and
// commit offsets another member now owns, possibly moving them back. Run therefore waits for the
// group to be empty before joining (ErrGroupInUse after Config.GroupWait) and stops with
// ErrRebalanced, committing nothing more, once the reader reports a second group generation.
//
// kafka-go decompresses each record batch whole into memory (a 300 MB zstd bomb grew the tap by
// 1.2 GB in a test). The tap bounds that at Config.MaxBatchBytes (topics.MaxBatchBytes of the
// advantages topic, 32 MiB) by wrapping kafka-go's codecs, and moves past a refused batch:
// flushes and commits, closes its reader, finds the batch's end, commits past it and starts a new
// reader there, counts Stats.SkippedBatches and warns (batchlimit.go, Tap.skipBatch). It writes
// no dead letter: the tap only reads. Bound: one refused batch costs about four times the limit
// at most (measured: +53–69 MiB for a 1.26 GB bomb).
//
// Files are at-least-once: after a crash between a rename and its commit, the records are
// written again on restart, possibly into a file with a different step range. Readers dedupe by
// (run, step, group, rollout) for advantages and (run, stream, step) for calibration.
package analytics
