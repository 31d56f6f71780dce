package correct

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// scrapeSum sums every sample of a metric (all label sets) on a /metrics endpoint.
func scrapeSum(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// floodRuns is the flood of TestConsumerRunFloodOnBroker: WMRL_TEST_FLOOD_RUNS, default 400,000
// (the load of issue 35).
func floodRuns(t *testing.T) int {
	if v, err := strconv.Atoi(os.Getenv("WMRL_TEST_FLOOD_RUNS")); err == nil && v > 0 {
		return v
	}
	return 400_000
}

// produceFlood writes n tiny valid manifests (one group of one rollout, step 1) of n distinct runs
// that never complete, keyed by run, as fast as one client can.
func produceFlood(t *testing.T, seeds []string, names topics.Names, n int) {
	t.Helper()
	tmpl := manifestRecord(t, "f0000000", 1, 1, 1).Value
	at := bytes.Index(tmpl, []byte(`"run_id":"f0000000"`)) + len(`"run_id":"f`)
	if at < len(`"run_id":"f`) {
		t.Fatalf("manifest template %s", tmpl)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.MaxBufferedRecords(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	for i := range n {
		v := bytes.Clone(tmpl)
		id := fmt.Sprintf("%07d", i)
		copy(v[at:], id)
		cl.Produce(ctx, &kgo.Record{Topic: names.Steps(), Key: []byte("f" + id), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// On the real broker, with `correct` as a subprocess and the default limits: a run is under way
// when a flood of tiny never-completing manifests of distinct runs arrives (400,000 by default,
// about 20 MB, the load that once took the consumer to 1.3 GB). The instance holds at most
// --max-active-runs runs and --max-held-dead-letters single dead letters, the rest is refused
// too-many-runs and folded into dead letters by reference, the run under way is still corrected
// exactly once, and the peak RSS stays under the bound docs/capacity.md states.
func TestConsumerRunFloodOnBroker(t *testing.T) {
	n := floodRuns(t)
	seeds := testenv.Kafka(t)
	redisURL := testenv.Redis(t)
	prefix := testenv.Name(t) + "."
	names := topics.NewNames(prefix)
	brokerTopics(t, seeds, names)
	cc := smallCorrection()

	wl := SynthConfig{Runs: 1, Steps: 4, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 1, Seed: 51, RunPrefix: "g"}
	steps := synthOn(t, names, wl)
	before, after := flatten(steps[:2]), flatten(steps[2:])
	perStep := rollouts(wl) / len(steps)

	cfg := childConfig{Seeds: seeds, RedisURL: redisURL, Prefix: prefix, Group: prefix + "g", TxnID: prefix + "tx",
		RedisPrefix: prefix + "state", MinPairs: cc.MinPairs, MetricsAddr: testenv.FreeAddr(t)}
	c := startChild(t, cfg, "correct.log")
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	testenv.Produce(t, seeds, before)
	rd.readUntil(t, 2*perStep, 60*time.Second)

	start := time.Now()
	produceFlood(t, seeds, names, n)
	t.Logf("%d manifests of distinct runs produced in %v", n, time.Since(start).Round(time.Millisecond))
	testenv.Produce(t, seeds, after)
	want := float64(n + len(before) + len(after))
	deadline := time.Now().Add(5 * time.Minute)
	for scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_records_total") < want {
		if time.Now().After(deadline) {
			t.Fatalf("consumer judged %v of %v records in 5 minutes", scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_records_total"), want)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("flood judged %v after the first flood record was produced", time.Since(start).Round(time.Millisecond))
	rd.readUntil(t, rollouts(wl), 60*time.Second)
	peak := float64(testenv.PeakRSS(t, c.cmd.Process.Pid)) / (1 << 20)
	active := scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_active_runs")
	held := scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_dead_letters_held")
	refused := scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_runs_refused_total")
	folded := scrapeSum(t, cfg.MetricsAddr, "wmrl_correct_dead_letters_aggregated_total")
	written := scrape(t, cfg.MetricsAddr, `wmrl_correct_dead_letters_total{reason="too-many-runs"}`)
	stopChild(t, c)
	t.Logf("%d flood runs: peak RSS %.0f MiB (bound %d MiB); %v active runs, %v dead letters held, %v records refused too-many-runs, %v folded",
		n, peak, rssBoundMB, active, held, refused, folded)

	rd.readUntil(t, rollouts(wl)+1, 1500*time.Millisecond)
	checkLive(t, rd.rows, rollouts(wl), topics.DigestRows(referenceRows(t, cc, retopic(flatten(steps), names))))
	if active > DefaultActiveRuns || held > DefaultHeldDeadLetters {
		t.Errorf("%v active runs, %v dead letters held; over the limits %d and %d", active, held, DefaultActiveRuns, DefaultHeldDeadLetters)
	}
	// Every flood run beyond the cap is refused; the cap holds the run under way and flood runs.
	if wantRefused := float64(n - (DefaultActiveRuns - 1)); n >= DefaultActiveRuns && refused != wantRefused {
		t.Errorf("%v records refused too-many-runs, want %v", refused, wantRefused)
	}
	// Each refused record is written at once (a partition none of the held runs pins), held, or
	// folded once the held dead letters reached the limit.
	if held < DefaultHeldDeadLetters || folded == 0 || written+held+folded != refused {
		t.Errorf("%v refused records: %v written, %v held, %v folded; want them all accounted for with %d held",
			refused, written, held, folded, DefaultHeldDeadLetters)
	}
	if peak > rssBoundMB && !raceEnabled { // the Makefile runs this test again without -race
		t.Errorf("peak RSS %.0f MiB over the documented bound of %d MiB", peak, rssBoundMB)
	}
}
