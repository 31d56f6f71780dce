// Package topicadmin creates and checks wmrl's topics with kadm. The layout is a contract: the
// correction consumer joins its inputs by run_id, so those topics must agree on partition count,
// and the calibration changelog must be compacted or state rebuilds lose history.
package topicadmin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/wmrl/wmrl/topics"
)

// Config keys that the plan sets and Check verifies.
const (
	keyCleanup   = "cleanup.policy"
	keyRetention = "retention.ms"
)

// Plan is the desired topic layout.
type Plan struct {
	Names       topics.Names
	Partitions  int32
	Replication int16
	// RetentionMS applies to the non-compacted topics; replay needs the input topics retained for
	// as long as runs must be reproducible. -1 keeps them forever.
	RetentionMS int64
}

// DefaultPlan is a single-broker development layout: 3 partitions, replication 1, 7 days.
func DefaultPlan(names topics.Names) Plan {
	return Plan{Names: names, Partitions: 3, Replication: 1, RetentionMS: 7 * 24 * 3600 * 1000}
}

// Spec is one topic's desired settings.
type Spec struct {
	Topic       string
	Partitions  int32
	Replication int16
	Configs     map[string]string
}

// Specs expands the plan into per-topic specs, in Names.All order.
func (p Plan) Specs() []Spec {
	ret := strconv.FormatInt(p.RetentionMS, 10)
	specs := make([]Spec, 0, 7)
	for _, t := range p.Names.All() {
		cfg := map[string]string{keyCleanup: "delete", keyRetention: ret}
		if t == p.Names.Calibration() {
			cfg = map[string]string{keyCleanup: "compact"}
		}
		specs = append(specs, Spec{Topic: t, Partitions: p.Partitions, Replication: p.Replication, Configs: cfg})
	}
	return specs
}

// Validate rejects plans the broker would reject with a less helpful message.
func (p Plan) Validate() error {
	if p.Partitions < 1 {
		return fmt.Errorf("partitions %d: must be at least 1", p.Partitions)
	}
	if p.Replication < 1 {
		return fmt.Errorf("replication factor %d: must be at least 1", p.Replication)
	}
	if p.RetentionMS == 0 || p.RetentionMS < -1 {
		return fmt.Errorf("retention %d ms: must be positive or -1 (forever)", p.RetentionMS)
	}
	return nil
}

// Result says what Create did with one topic.
type Result struct {
	Topic   string
	Created bool
	Err     error
}

// Create creates every missing topic; topics that already exist are left as they are (run
// Check to compare them with the plan), so Create is safe to run on every deploy.
func Create(ctx context.Context, adm *kadm.Client, p Plan) ([]Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []Result
	for _, s := range p.Specs() {
		cfg := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			cfg[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, s.Replication, cfg, s.Topic)
		switch {
		case err == nil:
			out = append(out, Result{Topic: s.Topic, Created: true})
		case errors.Is(err, kerr.TopicAlreadyExists):
			out = append(out, Result{Topic: s.Topic})
		default:
			if resp.ErrMessage != "" {
				err = fmt.Errorf("%w: %s", err, resp.ErrMessage)
			}
			return out, fmt.Errorf("create topic %s: %w", s.Topic, err)
		}
	}
	return out, waitVisible(ctx, adm, p)
}

// waitVisible waits until every topic's metadata lists all partitions with a leader: a broker
// acknowledges CreateTopics before the metadata has spread, and a check or produce right after
// create would otherwise see a missing or half-made topic.
func waitVisible(ctx context.Context, adm *kadm.Client, p Plan) error {
	names := p.Names.All()
	for {
		details, err := adm.ListTopics(ctx, names...)
		if err == nil && allLed(details, names) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics created but not yet visible with leaders: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func allLed(details kadm.TopicDetails, names []string) bool {
	for _, n := range names {
		d, ok := details[n]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return false
		}
		for _, pd := range d.Partitions {
			if pd.Leader < 0 || pd.Err != nil {
				return false
			}
		}
	}
	return true
}

// Mismatch is one difference between the plan and the cluster.
type Mismatch struct {
	Topic string
	Field string
	Want  string
	Got   string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("topic %s: %s is %s, want %s", m.Topic, m.Field, m.Got, m.Want)
}

// Check compares the cluster with the plan and returns every mismatch, including co-partitioned
// topics that disagree with each other even when the plan's own count is not what was asked. A
// plan with 0 partitions or replication does not compare them (`topics check` without
// --partitions: the layout must be consistent, whatever count it was created with).
func Check(ctx context.Context, adm *kadm.Client, p Plan) ([]Mismatch, error) {
	specs := p.Specs()
	details, err := adm.ListTopics(ctx, p.Names.All()...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var existing []string
	var out []Mismatch
	for _, s := range specs {
		d, ok := details[s.Topic]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			out = append(out, Mismatch{Topic: s.Topic, Field: "existence", Want: "exists", Got: "missing"})
			continue
		}
		if d.Err != nil {
			return nil, fmt.Errorf("describe topic %s: %w", s.Topic, d.Err)
		}
		existing = append(existing, s.Topic)
		if got := int32(len(d.Partitions)); s.Partitions > 0 && got != s.Partitions {
			out = append(out, Mismatch{Topic: s.Topic, Field: "partitions", Want: itoa(s.Partitions), Got: itoa(got)})
		}
		if rf := d.Partitions.NumReplicas(); s.Replication > 0 && rf != int(s.Replication) {
			out = append(out, Mismatch{Topic: s.Topic, Field: "replication factor", Want: itoa(s.Replication), Got: itoa(rf)})
		}
	}
	out = append(out, coPartitioning(p.Names, details)...)
	if len(existing) == 0 {
		return out, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	for _, s := range specs {
		rc, err := rcs.On(s.Topic, nil)
		if err != nil {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			want := s.Configs[k]
			got := "(unset)"
			for _, c := range rc.Configs {
				if c.Key == k {
					got = c.MaybeValue()
				}
			}
			if got != want {
				out = append(out, Mismatch{Topic: s.Topic, Field: k, Want: want, Got: got})
			}
		}
	}
	return out, nil
}

// coPartitioning reports co-partitioned topics whose partition counts differ from the first one.
func coPartitioning(n topics.Names, details kadm.TopicDetails) []Mismatch {
	var ref string
	var refN int
	var out []Mismatch
	for _, t := range n.CoPartitioned() {
		d, ok := details[t]
		if !ok || d.Err != nil {
			continue
		}
		if ref == "" {
			ref, refN = t, len(d.Partitions)
			continue
		}
		if len(d.Partitions) != refN {
			out = append(out, Mismatch{
				Topic: t, Field: "co-partitioning",
				Want: fmt.Sprintf("%d partitions like %s (records of a run must meet on one partition)", refN, ref),
				Got:  itoa(len(d.Partitions)),
			})
		}
	}
	return out
}

// TopicInfo is one row of Describe.
type TopicInfo struct {
	Topic       string
	Exists      bool
	Partitions  int
	Replication int
	Configs     map[string]string
	Records     int64 // sum over partitions of end minus start offset
}

// Describe reports the current state of every wmrl topic.
func Describe(ctx context.Context, adm *kadm.Client, n topics.Names) ([]TopicInfo, error) {
	names := n.All()
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var existing []string
	infos := make([]TopicInfo, len(names))
	for i, t := range names {
		infos[i] = TopicInfo{Topic: t, Configs: map[string]string{}}
		if d, ok := details[t]; ok && d.Err == nil {
			infos[i].Exists = true
			infos[i].Partitions = len(d.Partitions)
			infos[i].Replication = d.Partitions.NumReplicas()
			existing = append(existing, t)
		}
	}
	if len(existing) == 0 {
		return infos, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	for i := range infos {
		if !infos[i].Exists {
			continue
		}
		t := infos[i].Topic
		if rc, err := rcs.On(t, nil); err == nil {
			for _, c := range rc.Configs {
				if c.Key == keyCleanup || c.Key == keyRetention {
					infos[i].Configs[c.Key] = c.MaybeValue()
				}
			}
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != t || o.Err != nil {
				return
			}
			if s, ok := starts.Lookup(t, o.Partition); ok && s.Err == nil {
				infos[i].Records += o.Offset - s.Offset
			}
		})
	}
	return infos, nil
}

func itoa[T ~int | ~int16 | ~int32](v T) string { return strconv.Itoa(int(v)) }

// RequireLayout is what a stage checks at start-up: that each of the topics it needs exists and
// that the co-partitioned ones among them share one partition count. Unlike Check it expects no
// particular count or config, since a stage does not know the plan its operator chose. The error
// names the first problem and the command that fixes it.
func RequireLayout(ctx context.Context, adm *kadm.Client, n topics.Names, need []string) error {
	// Only the topics the stage needs are described: a least-privilege principal may not see
	// the others.
	details, err := adm.ListTopics(ctx, need...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, t := range need {
		d, ok := details[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic %s does not exist (run `wmrl topics create --topic-prefix %s`, or fix --topic-prefix)", t, n.EffectivePrefix())
		}
		if d.Err != nil {
			return fmt.Errorf("describe topic %s: %w", t, d.Err)
		}
	}
	if ms := coPartitioning(n, details); len(ms) > 0 {
		return fmt.Errorf("%s (run `wmrl topics check`)", ms[0])
	}
	return nil
}
