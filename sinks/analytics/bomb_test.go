package analytics

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// bombBytes is the decompressed size of the test's bomb: the 1.26 GB.
const bombBytes = 1200 << 20

// tapRSSBound is the tap's documented bound for one refused batch above its level before it: the
// limited decompression buffer (at most twice MaxBatchBytes, bytes.Buffer doubling), the same
// again for the bisection's fetches before the collector returns it, and 32 MiB of slack.
var tapRSSBound = int64(4*topics.MaxBatchBytes(topics.MaxAdvantageBytes) + 32<<20)

// vmRSS is this process's resident set (VmRSS of /proc/self/status).
func vmRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// A 135 KB-class zstd batch that decompresses to 1.26 GB on the advantages topic, between committed
// steps, on the real broker: the tap refuses it unread (its decompression stops at MaxBatchBytes),
// counts it, moves past it, writes every step after it, and its RSS stays inside tapRSSBound.
func TestTapSkipsDecompressionBomb(t *testing.T) {
	seeds := testenv.Kafka(t)
	advTopic := testenv.Topic(t, seeds, 1)
	calTopic := testenv.Topic(t, seeds, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var want []topics.AdvantageRow
	var visible int64
	send := func(step int64) {
		recs, rows, _ := stepRecords(t, "a", step, false, advTopic, calTopic)
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		visible += int64(len(recs))
		want = append(want, rows...)
	}
	send(0)
	ref := testenv.Bomb(t, seeds, advTopic, 0, bombBytes)
	send(1)
	send(2)

	dir := t.TempDir()
	tap, err := New(Config{Brokers: seeds, AdvantagesTopic: advTopic, CalibrationTopic: calTopic, Group: testenv.Name(t), Dir: dir,
		RollSteps: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	base := vmRSS(t)
	var peak atomic.Int64
	peak.Store(base)
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := vmRSS(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- tap.Run(runCtx) }()
	waitStats(t, ctx, tap, done, func(s Stats) bool { return s.SkippedBatches >= 1 && s.Messages >= visible })
	took := time.Since(start)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	close(stopSampling)
	<-sampled
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
	if s := tap.Stats(); s.SkippedBatches != 1 {
		t.Errorf("SkippedBatches %d, want 1 (stats %+v)", s.SkippedBatches, s)
	}
	growth := peak.Load() - base
	t.Logf("bomb %d bytes (%d compressed, offsets %d..%d) skipped in %v; peak RSS growth %d MiB (bound %d MiB)",
		ref.DecompressedBytes, ref.CompressedBytes, ref.BaseOffset, ref.NextOffset-1, took.Round(time.Millisecond), growth>>20, tapRSSBound>>20)
	if growth > tapRSSBound && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("RSS grew %d MiB under the bomb, bound %d MiB", growth>>20, tapRSSBound>>20)
	}
}
