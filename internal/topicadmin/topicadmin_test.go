package topicadmin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// exerciseAdmin is shared by the in-process and the real-broker tests: create is idempotent,
// check is clean after create, and drift is reported field by field.
func exerciseAdmin(t *testing.T, brokers []string, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := newAdmin(t, brokers)
	plan := DefaultPlan(topics.NewNames(prefix))
	plan.Partitions = 2

	first, err := Create(ctx, adm, plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		if !r.Created {
			t.Errorf("first create: %s not created", r.Topic)
		}
	}
	second, err := Create(ctx, adm, plan)
	if err != nil {
		t.Fatalf("second create must be a no-op, got %v", err)
	}
	for _, r := range second {
		if r.Created {
			t.Errorf("second create recreated %s", r.Topic)
		}
	}
	mm, err := Check(ctx, adm, plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) != 0 {
		t.Fatalf("check after create: %v", mm)
	}

	// Drift: one co-partitioned topic grows, the changelog loses compaction.
	if _, err := adm.UpdatePartitions(ctx, 3, plan.Names.Predicted()); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}}, plan.Names.Calibration()); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		mm, err = Check(ctx, adm, plan)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, m := range mm {
			got = append(got, m.String())
		}
		if len(mm) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{
		fmt.Sprintf("topic %s: partitions is 3, want 2", plan.Names.Predicted()),
		fmt.Sprintf("topic %s: co-partitioning is 3", plan.Names.Predicted()),
		fmt.Sprintf("topic %s: cleanup.policy is delete, want compact", plan.Names.Calibration()),
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("mismatches lack %q; got:\n%s", want, joined)
		}
	}

	infos, err := Describe(ctx, adm, plan.Names)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(plan.Names.All()) {
		t.Fatalf("describe returned %d topics", len(infos))
	}
	for _, in := range infos {
		if !in.Exists || in.Partitions < 2 {
			t.Errorf("describe %s: %+v", in.Topic, in)
		}
	}
}

func TestAdminInProcess(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exerciseAdmin(t, c.ListenAddrs(), "wmrltest.")
}

func TestCheckMissing(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plan := DefaultPlan(topics.NewNames("absent."))
	mm, err := Check(context.Background(), newAdmin(t, c.ListenAddrs()), plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) != len(plan.Names.All()) {
		t.Fatalf("want one missing mismatch per topic, got %v", mm)
	}
	for _, m := range mm {
		if m.Field != "existence" {
			t.Errorf("unexpected %v", m)
		}
	}
}

func TestPlanValidate(t *testing.T) {
	base := DefaultPlan(topics.NewNames(""))
	tests := []struct {
		name string
		mod  func(*Plan)
		want string
	}{
		{"ok", func(*Plan) {}, ""},
		{"zero partitions", func(p *Plan) { p.Partitions = 0 }, "partitions 0"},
		{"zero replication", func(p *Plan) { p.Replication = 0 }, "replication factor 0"},
		{"zero retention", func(p *Plan) { p.RetentionMS = 0 }, "retention 0"},
		{"forever", func(p *Plan) { p.RetentionMS = -1 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			tt.mod(&p)
			err := p.Validate()
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestSpecsCompactOnlyCalibration(t *testing.T) {
	plan := DefaultPlan(topics.NewNames(""))
	for _, s := range plan.Specs() {
		want := "delete"
		if s.Topic == plan.Names.Calibration() {
			want = "compact"
		}
		if s.Configs["cleanup.policy"] != want {
			t.Errorf("%s: cleanup.policy %q, want %q", s.Topic, s.Configs["cleanup.policy"], want)
		}
	}
}

func TestAdminRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	exerciseAdmin(t, brokers, testenv.Name(t)+".")
}

// TestRequireLayout runs against the real broker: a missing topic and a co-partitioned topic with
// another partition count each fail with the command that fixes them; a good layout passes.
func TestRequireLayout(t *testing.T) {
	brokers := testenv.Kafka(t)
	names := topics.NewNames(testenv.Name(t) + ".")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = RequireLayout(ctx, adm, names, []string{names.Rollouts()})
	if err == nil || !strings.Contains(err.Error(), names.Rollouts()+" does not exist") || !strings.Contains(err.Error(), "wmrl topics create") {
		t.Fatalf("missing topic: %v", err)
	}
	plan := DefaultPlan(names)
	plan.Partitions = 2
	if _, err := Create(ctx, adm, plan); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), names.All()...) })
	if err := RequireLayout(ctx, adm, names, []string{names.Rollouts(), names.Predicted(), names.DLQ()}); err != nil {
		t.Fatalf("good layout: %v", err)
	}
	if _, err := adm.CreatePartitions(ctx, 1, names.Executed()); err != nil {
		t.Fatal(err)
	}
	// The broker answers CreatePartitions before its metadata shows the new partition.
	for {
		d, err := adm.ListTopics(ctx, names.Executed())
		if err == nil && len(d[names.Executed()].Partitions) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the third partition of %s never showed in the metadata: %v", names.Executed(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err = RequireLayout(ctx, adm, names, []string{names.Rollouts(), names.Predicted(), names.Executed()})
	if err == nil || !strings.Contains(err.Error(), "co-partitioning") || !strings.Contains(err.Error(), "wmrl topics check") {
		t.Fatalf("mismatched partitions: %v", err)
	}
}
