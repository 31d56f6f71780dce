package correct

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics.record keeps the buffered series once looked up: the counts still land in
// wmrl_correct_records_total under the right labels, from concurrent callers too, and a kind
// never counted has no series.
func TestMetricsRecordCountsBuffered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				m.record(kindPredicted, resultBuffered)
			}
		}()
	}
	wg.Wait()
	m.record(kindPredicted, resultDuplicate)
	m.record(kindExecuted, resultBuffered)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wmrl_correct_records_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			got[labels] = mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"result=buffered topic=" + kindPredicted.String() + " ":  1000,
		"result=duplicate topic=" + kindPredicted.String() + " ": 1,
		"result=buffered topic=" + kindExecuted.String() + " ":   1,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v (no series for a kind never counted)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}
