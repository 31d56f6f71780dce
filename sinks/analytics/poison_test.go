package analytics

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// 10 MB compressible records on both tapped topics, between committed steps, on the real broker:
// the kafka-go reader fetches past them (their batches are under 1 MiB compressed, the reader's
// MaxBytes), the tap skips them as undecodable and writes every step and snapshot (the last ones
// by the shutdown flush).
func TestTapSkipsPoisonRecords(t *testing.T) {
	seeds := testenv.Kafka(t)
	advTopic := testenv.Topic(t, seeds, 1)
	calTopic := testenv.Topic(t, seeds, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var want []topics.AdvantageRow
	var wantCal []CalibrationRow
	visible := int64(2) // the poison records
	send := func(step int64) {
		recs, rows, snap := stepRecords(t, "a", step, false, advTopic, calTopic)
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		visible += int64(len(recs))
		want = append(want, rows...)
		wantCal = append(wantCal, CalibrationRowOf(snap))
	}
	poison := testenv.PoisonJSON(`"schema":"wmrl.calibration.v1"`, testenv.PoisonBytes)
	send(0)
	testenv.ProduceCompressed(t, seeds,
		&kgo.Record{Topic: advTopic, Key: []byte("a"), Value: poison,
			Headers: topics.Headers(topics.SchemaAdvantages, "a", 1, topics.Header(topics.HeaderChunk, "0/1"), topics.Header(topics.HeaderRows, "64"))},
		&kgo.Record{Topic: calTopic, Key: []byte("a/mle"), Value: poison})
	send(1)
	send(2)

	dir := t.TempDir()
	tap, err := New(Config{Brokers: seeds, AdvantagesTopic: advTopic, CalibrationTopic: calTopic, Group: testenv.Name(t), Dir: dir,
		RollSteps: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tap.Run(runCtx) }()
	waitStats(t, ctx, tap, done, func(s Stats) bool { return s.Messages >= visible && s.Skipped >= 2 })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	var got []topics.AdvantageRow
	adv, _ := filepath.Glob(filepath.Join(dir, "advantages-a-*.parquet"))
	sort.Strings(adv)
	for _, f := range adv {
		rows, err := ReadAdvantagesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rows...)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files %v hold %d rows, want the %d produced", adv, len(got), len(want))
	}
	var gotCal []CalibrationRow
	cal, _ := filepath.Glob(filepath.Join(dir, "calibration-a-*.parquet"))
	for _, f := range cal {
		rows, err := ReadCalibrationFile(f)
		if err != nil {
			t.Fatal(err)
		}
		gotCal = append(gotCal, rows...)
	}
	if !reflect.DeepEqual(gotCal, wantCal) {
		t.Errorf("calibration files hold %d rows, want %d", len(gotCal), len(wantCal))
	}
	t.Logf("stats %+v", tap.Stats())
}
