package topics

import "github.com/twmb/franz-go/pkg/kgo"

// PartitionFor is the partition of key run among n partitions under franz-go's default
// partitioner, which hashes keys like Java's (murmur2).
func PartitionFor(run string, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(run)}, n))
}
