package dashboard

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

func rows(step int64, pairs [][2]float64, calibrated float64) []topics.AdvantageRow {
	var out []topics.AdvantageRow
	for i, p := range pairs {
		out = append(out, topics.AdvantageRow{RunID: "r", Stream: "main", Step: step, GroupID: "g", RolloutID: string(rune('a' + i)),
			Source: topics.SourceAnchor, Predicted: p[0], PredictedOK: true, Calibrated: calibrated, Executed: p[1], ExecutedOK: true, Mask: true})
	}
	return out
}

// A reader gets no order across topics: whether a step's snapshot, advantages or rewards come
// first, the step shows the same errors, latency, weights and maps.
func TestModelJoinsStepsInAnyArrivalOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	snap := func(step int64, fit uint64, w float64, x []float64) topics.CalibrationSnapshot {
		return topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: step, FitVersion: fit, AnchorWeight: w, BreakX: x, BreakY: x, Pairs: 2 * int(step+1)}
	}
	events := map[string]func(m *Model){
		"reward0": func(m *Model) { m.Reward("p.rewards.executed.v1", "p.", "r", "main", 0, t0, "") },
		"adv0": func(m *Model) {
			m.Advantages("p.advantages.v1", "p.", rows(0, [][2]float64{{0.5, 0.3}, {0.2, 0.4}}, 0.35), t0.Add(7*time.Millisecond))
		},
		"snap0":   func(m *Model) { m.Snapshot("p.calibration.v1", "p.", snap(0, 0, 2, nil), t0) },
		"reward1": func(m *Model) { m.Reward("p.rewards.predicted.v1", "p.", "r", "main", 1, t0.Add(time.Second), "") },
		"adv1": func(m *Model) {
			m.Advantages("p.advantages.v1", "p.", rows(1, [][2]float64{{0.9, 0.6}}, 0.6), t0.Add(time.Second+3*time.Millisecond))
		},
		"snap1":     func(m *Model) { m.Snapshot("p.calibration.v1", "p.", snap(1, 1, 3, []float64{0.2, 0.8}), t0) },
		"snap1-dup": func(m *Model) { m.Snapshot("p.calibration.v1", "p.", snap(1, 9, 9, nil), t0) },
	}
	for _, order := range [][]string{
		{"reward0", "adv0", "snap0", "reward1", "adv1", "snap1", "snap1-dup"},
		{"snap1", "snap0", "adv1", "adv0", "reward1", "reward0", "snap1-dup"},
		{"adv0", "snap1", "reward0", "snap0", "snap1-dup", "adv1", "reward1"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			m := NewModel("p.", 10)
			for _, e := range order {
				events[e](m)
			}
			st := m.State()
			if len(st.Runs) != 1 || st.Runs[0].ID != "p.r/main" {
				t.Fatalf("runs %+v", st.Runs)
			}
			r := st.Runs[0]
			if len(r.Steps) != 2 {
				t.Fatalf("steps %+v", r.Steps)
			}
			s0, s1 := r.Steps[0], r.Steps[1]
			if s0.RawMAE == nil || math.Abs(*s0.RawMAE-0.2) > 1e-12 || math.Abs(*s0.CalibratedMAE-0.05) > 1e-12 || s0.Rows != 2 {
				t.Errorf("step 0 errors: %+v", s0)
			}
			if s0.LatencyMS == nil || *s0.LatencyMS != 7 || s1.LatencyMS == nil || *s1.LatencyMS != 3 {
				t.Errorf("latencies %v %v", s0.LatencyMS, s1.LatencyMS)
			}
			if s0.AnchorWeight != 1 || s0.NextAnchorWeight != 2 || s1.AnchorWeight != 2 || s1.NextAnchorWeight != 3 || s1.FitVersion != 1 {
				t.Errorf("weights/fit: %+v %+v", s0, s1)
			}
			if len(r.Maps) != 2 || len(r.Maps[0].X) != 0 || len(r.Maps[1].X) != 2 {
				t.Errorf("maps %+v", r.Maps)
			}
			if len(r.Pairs) != 3 {
				t.Errorf("pairs %v", r.Pairs)
			}
		})
	}
}

func TestModelCountsDeadLettersAndBoundsPairs(t *testing.T) {
	m := NewModel("p.", 2)
	m.DeadLetter("p.dlq.v1", "p.", "correct", "invalid", "bad score")
	m.DeadLetter("p.dlq.v1", "p.", "correct", "invalid", "worse score")
	m.DeadLetter("p.dlq.v1", "p.", "sandbox", "decode", "x")
	m.Advantages("p.advantages.v1", "p.", rows(0, [][2]float64{{0.1, 0.1}, {0.2, 0.2}, {0.3, 0.3}}, 0), time.Now())
	st := m.State()
	if len(st.DeadLetters) != 2 || st.DeadLetters[0].Count != 2 || st.DeadLetters[0].LastError != "worse score" || st.DeadLetters[1].Stage != "sandbox" {
		t.Errorf("dead letters %+v", st.DeadLetters)
	}
	if p := st.Runs[0].Pairs; len(p) != 2 || p[0][1] != 0.2 {
		t.Errorf("pairs %v, want the newest 2", p)
	}
	var dlq TopicRate
	for _, tr := range st.Topics {
		if tr.Topic == "p.dlq.v1" {
			dlq = tr
		}
	}
	if dlq.Records != 3 || dlq.Stage != "any stage" || dlq.PerSecond <= 0 {
		t.Errorf("dlq topic rate %+v", dlq)
	}
}

func TestHandlerServesStateMapsAndEvents(t *testing.T) {
	m := NewModel("p.", 10)
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 0, AnchorWeight: 1}, time.Now())
	srv := httptest.NewServer(Handler(m))
	defer srv.Close()

	var st State
	getJSON(t, srv.URL+"/api/state", &st)
	if len(st.Runs) != 1 || len(st.Runs[0].Steps) != 1 {
		t.Fatalf("state %+v", st)
	}
	var maps []Map
	getJSON(t, srv.URL+"/api/maps?id=p.r/main", &maps)
	if len(maps) != 1 {
		t.Fatalf("maps %+v", maps)
	}
	if resp, err := http.Get(srv.URL + "/api/maps?id=nope"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown run: %v %v", resp, err)
	}
	for _, asset := range []string{"/", "/app.js", "/svgchart.js", "/style.css"} {
		resp, err := http.Get(srv.URL + asset)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", asset, resp, err)
		}
		resp.Body.Close()
	}

	// The event stream sends the state on connect and again after a change.
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan State, 4)
	go func() {
		buf := make([]byte, 1<<20)
		var pending string
		for {
			n, err := resp.Body.Read(buf)
			pending += string(buf[:n])
			for {
				i := strings.Index(pending, "\n\n")
				if i < 0 {
					break
				}
				ev := pending[:i]
				pending = pending[i+2:]
				if _, data, ok := strings.Cut(ev, "\ndata: "); ok && strings.HasPrefix(ev, "event: state") {
					var s State
					if json.Unmarshal([]byte(data), &s) == nil {
						events <- s
					}
				}
			}
			if err != nil {
				close(events)
				return
			}
		}
	}()
	first := <-events
	if len(first.Runs) != 1 || len(first.Runs[0].Steps) != 1 {
		t.Fatalf("first event %+v", first)
	}
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 1, AnchorWeight: 1}, time.Now())
	select {
	case next := <-events:
		if len(next.Runs[0].Steps) != 2 || next.Version <= first.Version {
			t.Fatalf("next event %+v", next)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event after a change")
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
