package dashboard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// The follower reads committed records only: a snapshot produced in an aborted transaction never
// becomes a step, the committed ones do, and a topic set created after the follower started is
// picked up. Dead letters are counted by stage and reason. It runs with the calibration records
// bare (binary) and framed as `wmrl correct --schema-registry` writes them.
func TestFollowerReadsCommittedRecordsOfEveryTopicSet(t *testing.T) {
	for _, framed := range []bool{false, true} {
		t.Run(map[bool]string{false: "bare", true: "framed"}[framed], func(t *testing.T) { followerReadsCommitted(t, framed) })
	}
}

func followerReadsCommitted(t *testing.T, framed bool) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	f, err := NewFollower(Config{KafkaOpts: []kgo.Opt{seeds}, TopicPrefix: "t.", PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	prod, err := kgo.NewClient(seeds, kgo.TransactionalID("test-producer"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	txn := func(commit bool, recs ...*kgo.Record) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	names := topics.NewNames("t.a.")
	if framed {
		fake := schemareg.NewDouble()
		defer fake.Close()
		reg, err := schemareg.New(schemareg.Config{URLs: []string{fake.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		if names, err = reg.FramingNames(ctx, names); err != nil {
			t.Fatal(err)
		}
	}
	snap := func(step int64, w float64) *kgo.Record {
		r, err := names.CalibrationRecord(topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: step, Digest: "d", AnchorWeight: w})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	man, err := names.StepRecord(topics.StepManifest{Schema: topics.SchemaStep, RunID: "r", Step: 0, PolicyVersion: "p0", CreatedAt: time.Unix(1, 0),
		Groups: []topics.GroupManifest{{GroupID: "g0", Stream: "main", Size: 2, Anchor: true}, {GroupID: "g1", Stream: "main", Size: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	end, err := names.CalibrationEndRecord(topics.CalibrationEnd{RunID: "r", LastStep: 1, EndedAt: time.Unix(2, 0), Reason: topics.EndReasonMarker})
	if err != nil {
		t.Fatal(err)
	}
	if ct, _ := topics.HeaderValue(end.Headers, topics.HeaderContentType); (ct == topics.ContentTypeProtobufConfluent) != framed {
		t.Fatalf("end record content-type %q", ct)
	}
	txn(true, man, snap(0, 1.5))
	txn(false, snap(1, 9)) // aborted
	txn(true, snap(1, 2.5), end)
	// A second topic set, created now, and a dead letter in it.
	later := topics.NewNames("t.b.")
	src := &kgo.Record{Topic: later.Executed(), Key: []byte("r"), Value: []byte("{")}
	txn(true, topics.NewDeadLetterWriter(later, "correct").Record(src, errors.New("boom")))

	deadline := time.After(30 * time.Second)
	for {
		st := f.Model().State()
		if len(st.Runs) == 1 && len(st.Runs[0].Steps) == 2 && len(st.DeadLetters) == 1 && st.Runs[0].Ended != nil && st.Runs[0].Groups > 0 {
			s := st.Runs[0].Steps
			if s[1].AnchorWeight != 1.5 || s[1].NextAnchorWeight != 2.5 {
				t.Fatalf("step 1 shows the aborted snapshot: %+v", s[1])
			}
			if d := st.DeadLetters[0]; d.Prefix != "t.b." || d.Stage != "correct" || d.Count != 1 || d.LastError != "boom" {
				t.Fatalf("dead letters %+v", st.DeadLetters)
			}
			if r := st.Runs[0]; r.Ended == nil || r.Ended.LastStep != 1 || r.Ended.Reason != topics.EndReasonMarker || r.AnchorGroups != 1 || r.Groups != 2 {
				t.Fatalf("run %s: end %+v, groups %d anchor %d; want the end record and the manifest's 2 groups, 1 anchor", r.ID, r.Ended, r.Groups, r.AnchorGroups)
			}
			break
		}
		select {
		case <-deadline:
			t.Fatalf("follower state: %+v", st)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
