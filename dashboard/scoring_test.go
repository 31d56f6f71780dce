package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// TestModelScoringHealth feeds failure and score records and checks the per-stage counts, the
// recent failed share and the newest error.
func TestModelScoringHealth(t *testing.T) {
	tests := []struct {
		name       string
		wm, sb     string // per record: o scored, f failed
		wantWM     ScoringHealth
		wantSB     ScoringHealth
		wantStages int
	}{
		{"all scored", "oooo", "oo", ScoringHealth{Records: 4}, ScoringHealth{Records: 2}, 2},
		{"judge down", "ffff", "", ScoringHealth{Records: 4, Failed: 4, RecentFailedShare: 1, LastError: "error: down"}, ScoringHealth{}, 1},
		{"recovered beyond the window", "ff" + repeat('o', ScoringWindow), "f",
			ScoringHealth{Records: ScoringWindow + 2, Failed: 2, LastError: "error: down"},
			ScoringHealth{Records: 1, Failed: 1, RecentFailedShare: 1, LastError: "error: down"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewModel("p.", 10)
			feed := func(topic, seq string) {
				for i, c := range seq {
					fail := ""
					if c == 'f' {
						fail = "error: down"
					}
					m.Reward(topic, "p.", "r", "main", int64(i), time.Unix(int64(i), 0), fail)
				}
			}
			feed("p.rewards.predicted.v1", tt.wm)
			feed("p.rewards.executed.v1", tt.sb)
			got := map[string]ScoringHealth{}
			for _, h := range m.State().Scoring {
				got[h.Stage] = h
			}
			if len(got) != tt.wantStages {
				t.Fatalf("stages %+v", got)
			}
			for stage, want := range map[string]ScoringHealth{"world model": tt.wantWM, "sandbox": tt.wantSB} {
				if want.Records == 0 {
					continue
				}
				want.Prefix, want.Stage = "p.", stage
				if got[stage] != want {
					t.Errorf("%s: %+v, want %+v", stage, got[stage], want)
				}
			}
		})
	}
}

func repeat(c rune, n int) string {
	b := make([]rune, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

// TestRewardFailure decodes the status of real reward records.
func TestRewardFailure(t *testing.T) {
	names := topics.NewNames("p.")
	s := 0.5
	ok, err := names.PredictedRecord(topics.PredictedReward{RolloutRef: topics.RolloutRef{RunID: "r", Step: 1, GroupID: "g", RolloutID: "g-0", Stream: "main", PolicyVersion: "v"}, Status: topics.StatusOK, Score: &s, Model: "m", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := names.ExecutedRecord(topics.ExecutedReward{RolloutRef: topics.RolloutRef{RunID: "r", Step: 1, GroupID: "g", RolloutID: "g-0", Stream: "main", PolicyVersion: "v"}, Status: topics.StatusError, Reason: "exit status 2", ExitCode: 2, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if f := rewardFailure(topics.SuffixPredicted, ok); f != "" {
		t.Errorf("scored record read as failure %q", f)
	}
	if f := rewardFailure(topics.SuffixExecuted, bad); f != "error: exit status 2" {
		t.Errorf("failure record read as %q", f)
	}
}

// TestLatencyNeverNegative: a reward record newer than the step's advantages (a stage redid the
// step after a restart) leaves the latency unknown instead of negative.
func TestLatencyNeverNegative(t *testing.T) {
	m := NewModel("p.", 10)
	t0 := time.Unix(1000, 0)
	m.Advantages("p.advantages.v1", "p.", rows(0, [][2]float64{{0.5, 0.5}}, 0.5), t0)
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 0, AnchorWeight: 1}, t0)
	m.Reward("p.rewards.predicted.v1", "p.", "r", "main", 0, t0.Add(-time.Second), "")
	if l := m.State().Runs[0].Steps[0].LatencyMS; l == nil || *l != 1000 {
		t.Fatalf("latency %v, want 1000 ms", l)
	}
	m.Reward("p.rewards.predicted.v1", "p.", "r", "main", 0, t0.Add(813*time.Second), "")
	if l := m.State().Runs[0].Steps[0].LatencyMS; l != nil {
		t.Fatalf("latency %v ms after a redone reward, want unknown", *l)
	}
}

// TestModelCountsMaskedRows: a step's rows with mask false are counted per step.
func TestModelCountsMaskedRows(t *testing.T) {
	m := NewModel("p.", 10)
	rs := rows(0, [][2]float64{{0.5, 0.5}, {0.4, 0.4}, {0.3, 0.3}}, 0.5)
	rs[1].Mask, rs[2].Mask = false, false
	m.Advantages("p.advantages.v1", "p.", rs, time.Unix(1, 0))
	m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: "r", Stream: "main", Step: 0, AnchorWeight: 1}, time.Unix(1, 0))
	if s := m.State().Runs[0].Steps[0]; s.MaskedRows != 2 || s.Rows != 3 {
		t.Fatalf("step rows %d masked %d, want 3 and 2", s.Rows, s.MaskedRows)
	}
}

// TestModelWiring: a topic set with rollouts and no live reader of its predicted topic is named
// once the groups were polled; a live reader clears it.
func TestModelWiring(t *testing.T) {
	m := NewModel("p.", 10)
	m.Count("p.rollouts.v1")
	if w := m.State().Wiring; len(w) != 0 {
		t.Fatalf("wiring before the first group poll: %q", w)
	}
	m.SetGroups(nil)
	st := m.State()
	if w := st.Wiring; len(w) != 2 || !strings.Contains(w[0], "p.rewards.predicted.v1") || !strings.Contains(w[0], "--topic-prefix p.") ||
		!strings.HasPrefix(w[1], "nothing scores the rollouts of p.: no consumer group with live members reads p.rollouts.v1") {
		t.Fatalf("wiring %q, want the prefix's predicted topic and its unscored rollouts named", w)
	}
	if sc := st.Scoring; len(sc) != 1 || !sc[0].Unscored || sc[0].Prefix != "p." || !strings.Contains(sc[0].LastError, "1 rollouts") {
		t.Fatalf("scoring %+v, want the unscored topic set", sc)
	}
	// Scorers that ran and stopped (a finished demo): named under Wiring, not an unscored set.
	m.Reward("p.rewards.predicted.v1", "p.", "r", "main", 0, time.Unix(1, 0), "")
	if st := m.State(); len(st.Wiring) != 2 || len(st.Scoring) != 1 || st.Scoring[0].Unscored {
		t.Fatalf("wiring %q, scoring %+v after a reward record", st.Wiring, st.Scoring)
	}
	m.SetGroups([]GroupLag{{Group: "p.wmrl-correct", Topic: "p.rewards.predicted.v1", State: "Stable", Members: 1},
		{Group: "p.wmrl-worldmodel", Topic: "p.rollouts.v1", State: "Stable", Members: 1}})
	if st := m.State(); len(st.Wiring) != 0 || len(st.Scoring) != 1 || st.Scoring[0].Unscored {
		t.Fatalf("wiring %q, scoring %+v with live readers", st.Wiring, st.Scoring)
	}
}
