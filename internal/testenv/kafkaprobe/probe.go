// Package kafkaprobe asks a Kafka cluster what it is and whether it can
// commit a transaction. It backs deploy/local/kafkaready (the readiness gate
// of the local broker) and the testenv integration tests, so "ready" means
// the same thing in both places.
package kafkaprobe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// ErrNoBrokers is returned when a metadata response lists no broker, which a
// cluster that is still starting can answer.
var ErrNoBrokers = errors.New("kafkaprobe: metadata lists no brokers")

// Info is what a cluster says about itself over the Kafka protocol. Kafka
// does not send its release number on the wire, so the release is inferred
// from the API versions and the finalized metadata.version feature.
type Info struct {
	ClusterID  string
	Controller int32
	Brokers    []string // host:port of every broker in the metadata, sorted by node id

	// NodeID is the broker the ApiVersions answer came from.
	NodeID int32
	// VersionGuess is kversion's guess from the ApiVersions key ranges,
	// for example "v4.4" or "at least v4.4".
	VersionGuess string
	// MetadataVersion is the finalized metadata.version feature level, or
	// -1 if the broker reported none (pre-3.3 or before finalization).
	MetadataVersion int16
	// MetadataVersionName describes that level, for example
	// "4.4-IV2: controller unregistration (KIP-1312)"; empty when unknown.
	MetadataVersionName string
}

// Release is the major.minor release the broker reports, taken from the
// metadata.version name when known ("4.4") and from the API-version guess
// otherwise ("v4.4" → "4.4"). It is empty when neither is conclusive.
func (i Info) Release() string {
	if name, _, ok := strings.Cut(i.MetadataVersionName, "-IV"); ok && name != "" {
		return name
	}
	g := strings.TrimPrefix(i.VersionGuess, "at least ")
	if strings.HasPrefix(g, "v") && !strings.ContainsAny(g, " ") {
		return strings.TrimPrefix(g, "v")
	}
	return ""
}

func (i Info) String() string {
	mv := "none reported"
	if i.MetadataVersion >= 0 {
		mv = fmt.Sprintf("%d", i.MetadataVersion)
		if i.MetadataVersionName != "" {
			mv += " (" + i.MetadataVersionName + ")"
		}
	}
	return fmt.Sprintf("cluster %s, controller %d, brokers %s; node %d answers ApiVersions like Kafka %s, metadata.version %s",
		i.ClusterID, i.Controller, strings.Join(i.Brokers, ","), i.NodeID, i.VersionGuess, mv)
}

// Describe sends a metadata request and an ApiVersions request to every
// broker in it, and reports the first broker that answered.
func Describe(ctx context.Context, cl *kgo.Client) (Info, error) {
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("kafkaprobe: metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return Info{}, ErrNoBrokers
	}
	info := Info{ClusterID: md.Cluster, Controller: md.Controller, NodeID: -1, MetadataVersion: -1}
	for _, b := range md.Brokers {
		info.Brokers = append(info.Brokers, fmt.Sprintf("%s:%d", b.Host, b.Port))
	}
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("kafkaprobe: api versions: %w", err)
	}
	var errs []error
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", v.NodeID, v.Err))
			continue
		}
		info.NodeID = v.NodeID
		info.VersionGuess = v.VersionGuess()
		for _, f := range v.Raw().FinalizedFeatures {
			if f.Name == "metadata.version" && v.Raw().FinalizedFeaturesEpoch >= 0 {
				info.MetadataVersion = f.MaxVersionLevel
				info.MetadataVersionName = kversion.FeatureLevelDescription(f.Name, f.MaxVersionLevel)
			}
		}
		return info, nil
	}
	return Info{}, fmt.Errorf("kafkaprobe: no broker answered ApiVersions: %w", errors.Join(errs...))
}

// CommitTransactional creates topic (one partition, the broker's default
// replication factor) if it is missing,
// commits one transactional record to it, and reads it back with
// read_committed. On a fresh cluster the first InitProducerId creates
// __transaction_state, so success means transactions really work, not just
// that the port is open. Extra client options (for example logging) are
// appended to both clients.
func CommitTransactional(ctx context.Context, seeds []string, topic string, opts ...kgo.Opt) error {
	nonce, err := randomHex(8)
	if err != nil {
		return err
	}
	if err := ensureTopic(ctx, seeds, topic, opts); err != nil {
		return err
	}

	popts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.TransactionalID("wmrl.kafkaprobe." + nonce),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, opts...)
	producer, err := kgo.NewClient(popts...)
	if err != nil {
		return fmt.Errorf("kafkaprobe: producer client: %w", err)
	}
	defer producer.Close()

	if err := producer.BeginTransaction(); err != nil {
		return fmt.Errorf("kafkaprobe: begin transaction: %w", err)
	}
	rec := &kgo.Record{Key: []byte("ready"), Value: []byte(nonce), Partition: 0}
	if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		// Best effort: the produce error is the one worth reporting.
		_ = producer.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return fmt.Errorf("kafkaprobe: transactional produce to %s: %w", topic, err)
	}
	if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("kafkaprobe: commit transaction: %w", err)
	}

	copts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			topic: {0: kgo.NewOffset().At(rec.Offset)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, opts...)
	consumer, err := kgo.NewClient(copts...)
	if err != nil {
		return fmt.Errorf("kafkaprobe: consumer client: %w", err)
	}
	defer consumer.Close()
	for {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("kafkaprobe: committed record at offset %d not readable with read_committed: %w", rec.Offset, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, err))
		})
		if ferr != nil && !kerr.IsRetriable(ferr) {
			return fmt.Errorf("kafkaprobe: read back: %w", ferr)
		}
		for _, r := range fs.Records() {
			if string(r.Value) == nonce {
				return nil
			}
		}
	}
}

func ensureTopic(ctx context.Context, seeds []string, topic string, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("kafkaprobe: admin client: %w", err)
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafkaprobe: create topic %s: %w", topic, err)
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("kafkaprobe: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
