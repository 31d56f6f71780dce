package analytics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

func advRows(run string, step int64, poisoned bool) []topics.AdvantageRow {
	var rows []topics.AdvantageRow
	for g := 0; g < 8; g++ {
		for i := 0; i < 8; i++ {
			v := float64((int(step)*13+g*5+i)%50) / 50
			if poisoned {
				v = 0.999
			}
			r := topics.AdvantageRow{RunID: run, Stream: "mle", Step: step, GroupID: fmt.Sprintf("g%d", g),
				RolloutID: fmt.Sprintf("g%d-r%d", g, i), Source: topics.SourceWorldModel, Predicted: v, PredictedOK: true,
				Calibrated: v, Used: v, Advantage: v - 0.5, Weight: 1, Mask: true, CalibrationVersion: uint64(step)}
			if i == 7 {
				r = topics.AdvantageRow{RunID: run, Stream: "mle", Step: step, GroupID: r.GroupID, RolloutID: r.RolloutID}
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// stepRecords are the advantage chunks of (run, step) on advTopic followed by its calibration
// snapshot on calTopic, with the rows and the snapshot they carry; poisoned as for advRows.
func stepRecords(t *testing.T, run string, step int64, poisoned bool, advTopic, calTopic string) ([]*kgo.Record, []topics.AdvantageRow, topics.CalibrationSnapshot) {
	t.Helper()
	return stepRecordsAs(t, topics.NewNames(""), run, step, poisoned, advTopic, calTopic)
}

// stepRecordsAs is stepRecords written by names' builders (framed when names has a registry).
func stepRecordsAs(t *testing.T, names topics.Names, run string, step int64, poisoned bool, advTopic, calTopic string) ([]*kgo.Record, []topics.AdvantageRow, topics.CalibrationSnapshot) {
	t.Helper()
	rows := advRows(run, step, poisoned)
	recs, err := names.AdvantageRecords(run, "", step, rows, 4096)
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(run, step, poisoned)
	cal, err := names.CalibrationRecord(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		r.Topic = advTopic
	}
	cal.Topic = calTopic
	return append(recs, cal), rows, snap
}

func snapshot(run string, step int64, poisoned bool) topics.CalibrationSnapshot {
	w := 1 + float64(step)/10
	if poisoned {
		w = 3.99
	}
	return topics.CalibrationSnapshot{Schema: topics.SchemaCalibration, RunID: run, Stream: "mle", Step: step,
		FitVersion: uint64(step), Pairs: int(step) * 16, Digest: fmt.Sprintf("d-%s-%d", run, step),
		BreakX: []float64{0.1, 0.5, 0.9}, BreakY: []float64{0.2, 0.4, 0.8}, AnchorWeight: w,
		BiasBefore: 0.1, BiasAfter: 0.01, StepPairs: 16, CreatedAt: time.Unix(1700000000, 0).UTC()}
}

// framedNames are names whose builders Confluent-frame the advantages and calibration records as
// `wmrl correct --schema-registry` does (against an in-process registry).
func framedNames(t *testing.T) topics.Names {
	t.Helper()
	fake := schemareg.NewDouble()
	t.Cleanup(fake.Close)
	reg, err := schemareg.New(schemareg.Config{URLs: []string{fake.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	names, err := reg.FramingNames(context.Background(), topics.NewNames(""))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTapWritesExactlyTheCommittedRecords produces steps with their calibration snapshots in
// transactions (one aborted, with poisoned values), runs the kafka-go tap, stops it with a
// partial segment pending and checks that the Parquet files read back to exactly the committed
// records, and that the group's offsets cover everything. Run b's records are written as
// `wmrl correct` writes them with a schema registry (Confluent-framed Protobuf): its files must
// hold the same rows and snapshots as bare records would.
func TestTapWritesExactlyTheCommittedRecords(t *testing.T) {
	seeds := testenv.Kafka(t)
	advTopic := testenv.Topic(t, seeds, 3)
	calTopic := testenv.Topic(t, seeds, 3)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(testenv.Name(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	wantRows := map[string][]topics.AdvantageRow{}
	wantCal := map[string][]CalibrationRow{}
	visible := int64(0) // committed records produced: what the tap must consume before it stops
	framed := framedNames(t)
	send := func(run string, step int64, commit bool) {
		names := topics.NewNames("")
		if run == "b" {
			names = framed
		}
		recs, rows, snap := stepRecordsAs(t, names, run, step, !commit, advTopic, calTopic)
		if ct, _ := topics.HeaderValue(recs[0].Headers, topics.HeaderContentType); (ct == topics.ContentTypeProtobufConfluent) != (run == "b") {
			t.Fatalf("run %s: content-type %q", run, ct)
		}
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if commit {
			wantRows[run] = append(wantRows[run], rows...)
			wantCal[run] = append(wantCal[run], CalibrationRowOf(snap))
			visible += int64(len(recs))
		}
	}
	for step := int64(0); step < 5; step++ {
		if step == 2 {
			send("a", step, false)
		}
		send("a", step, true)
	}
	send("b", 0, true)
	send("b", 1, true)
	// Run c has one step (RollSteps 2): its segment can only be written by the shutdown flush.
	send("c", 0, true)

	dir := t.TempDir()
	tap, err := New(Config{Brokers: seeds, AdvantagesTopic: advTopic, CalibrationTopic: calTopic, Group: testenv.Name(t), Dir: dir, RollSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tap.Run(runCtx) }()
	// Which files exist before shutdown depends on arrival order across the two topics (a run's
	// segment rolls when either its advantage steps or its snapshots reach RollSteps), so the test
	// waits for the tap to have consumed every committed record, then compares the union of the
	// files with what was committed.
	waitStats(t, ctx, tap, done, func(s Stats) bool { return s.Messages-s.Hidden >= visible })
	// A second tap on the same group must not join it (it would take partitions whose offsets
	// the first tap commits).
	second, err := New(Config{Brokers: seeds, AdvantagesTopic: advTopic, CalibrationTopic: calTopic, Group: tap.cfg.Group, Dir: t.TempDir(), GroupWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Run(ctx); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("second tap on the group: Run = %v, want ErrGroupInUse", err)
	}
	if partial, _ := filepath.Glob(filepath.Join(dir, "*-c-*.parquet")); len(partial) != 0 {
		t.Fatalf("run c's one-step segment was written before shutdown: %v", partial)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	for _, run := range []string{"a", "b", "c"} {
		adv, _ := filepath.Glob(filepath.Join(dir, "advantages-"+run+"-*.parquet"))
		cal, _ := filepath.Glob(filepath.Join(dir, "calibration-"+run+"-*.parquet"))
		sort.Strings(adv)
		sort.Strings(cal)
		var gotRows []topics.AdvantageRow
		for _, f := range adv {
			rows, err := ReadAdvantagesFile(f)
			if err != nil {
				t.Fatal(err)
			}
			gotRows = append(gotRows, rows...)
		}
		if !reflect.DeepEqual(gotRows, wantRows[run]) {
			t.Errorf("run %s: files %v hold %d rows that differ from the %d committed rows", run, adv, len(gotRows), len(wantRows[run]))
		}
		var gotCal []CalibrationRow
		for _, f := range cal {
			rows, err := ReadCalibrationFile(f)
			if err != nil {
				t.Fatal(err)
			}
			gotCal = append(gotCal, rows...)
		}
		if !reflect.DeepEqual(gotCal, wantCal[run]) {
			t.Errorf("run %s: calibration files %v:\n got %+v\nwant %+v", run, cal, gotCal, wantCal[run])
		}
	}
	for _, f := range []string{"advantages-c-0-0.parquet", "calibration-c-0-0.parquet"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("shutdown did not flush the partial segment: %v", err)
		}
	}
	if st := tap.Stats(); st.Hidden == 0 || st.Skipped != 0 {
		t.Errorf("stats %+v: want aborted records and markers hidden, nothing skipped", st)
	}

	adm := kadm.NewClient(prod)
	committed, err := adm.FetchOffsets(ctx, tap.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, advTopic, calTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if !ok || c.At < o.Offset-1 {
			t.Errorf("%s/%d: committed %+v, end %d", o.Topic, o.Partition, c, o.Offset)
		}
	})
}

// waitStats polls tap.Stats until ok holds.
func waitStats(t *testing.T, ctx context.Context, tap *Tap, done <-chan error, ok func(Stats) bool) {
	t.Helper()
	for !ok(tap.Stats()) {
		select {
		case err := <-done:
			t.Fatalf("tap stopped early (stats %+v): %v", tap.Stats(), err)
		case <-ctx.Done():
			t.Fatalf("stats %+v never reached the expected state: %v", tap.Stats(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestTapStopsOnRebalance lets another consumer join the tap's group while a segment is pending
// and checks that the tap stops with ErrRebalanced without committing that segment's offsets.
func TestTapStopsOnRebalance(t *testing.T) {
	seeds := testenv.Kafka(t)
	advTopic := testenv.Topic(t, seeds, 2)
	calTopic := testenv.Topic(t, seeds, 2)
	names := topics.NewNames("")
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var produced int64
	for step := int64(0); step < 3; step++ {
		recs, err := names.AdvantageRecords("a", "", step, advRows("a", step, false), 4096)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			r.Topic = advTopic
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		produced += int64(len(recs))
	}
	dir := t.TempDir()
	group := testenv.Name(t)
	tap, err := New(Config{Brokers: seeds, AdvantagesTopic: advTopic, CalibrationTopic: calTopic, Group: group, Dir: dir, RollSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- tap.Run(runCtx) }()
	waitStats(t, ctx, tap, done, func(s Stats) bool { return s.Messages >= produced && s.Files >= 1 })

	adm := kadm.NewClient(prod)
	before, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	other := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds, GroupID: group, GroupTopics: []string{advTopic, calTopic}})
	defer other.Close()
	for tap.generations() < 2 {
		select {
		case err := <-done:
			t.Fatalf("tap stopped before the rebalance reached it: %v", err)
		case <-ctx.Done():
			t.Fatalf("the tap never saw the second member join: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; !errors.Is(err, ErrRebalanced) {
		t.Fatalf("Run after a rebalance = %v, want ErrRebalanced", err)
	}
	after, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before.Offsets(), after.Offsets()) {
		t.Errorf("offsets moved after the rebalance:\nbefore %v\n after %v", before.Offsets(), after.Offsets())
	}
	if _, err := os.Stat(filepath.Join(dir, "advantages-a-0-1.parquet")); err != nil {
		t.Errorf("file rolled before the rebalance: %v", err)
	}
}
