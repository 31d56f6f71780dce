package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// ScoringWindow is how many recent reward records of a stage ScoringHealth.RecentFailedShare is
// taken over (the stages' own --failure-window default).
const ScoringWindow = 100

// ScoringAlarm is the recent failed share above which the page shows a stage, or a step's masked
// rows, in red (the stages' --max-failure-share and correct's --max-masked-share defaults).
const ScoringAlarm = 0.5

// ScoringHealth is one stage's reward records of one topic set, as the topics show them: a
// failure record (status timeout, error or invalid) means the world model or the sandbox could
// not score the rollout, and the trainer gets its row masked.
type ScoringHealth struct {
	Prefix string `json:"prefix"`
	// Stage is "world model" (the predicted topic) or "sandbox" (the executed topic).
	Stage   string `json:"stage"`
	Records int    `json:"records"`
	Failed  int    `json:"failed"`
	// RecentFailedShare is the failed share of the last ScoringWindow records.
	RecentFailedShare float64 `json:"recent_failed_share"`
	// LastError is "<status>: <reason>" of the newest failure record.
	LastError string `json:"last_error"`
	// Unscored marks a topic set whose rollouts nothing scores (Stage "world model and
	// sandbox", Records 0): no consumer group with live members reads its rollouts topic.
	Unscored bool `json:"unscored,omitempty"`
}

type scoringKey struct{ prefix, stage string }

// scoringAcc counts one stage's reward records; recent is a ring of the last ScoringWindow.
type scoringAcc struct {
	records, failed int
	recent          []bool
	next, recentBad int
	lastError       string
}

func (a *scoringAcc) add(failure string) {
	bad := failure != ""
	a.records++
	if bad {
		a.failed++
		a.lastError = failure
	}
	if len(a.recent) < ScoringWindow {
		a.recent = append(a.recent, bad)
	} else {
		if a.recent[a.next] {
			a.recentBad--
		}
		a.recent[a.next] = bad
		a.next = (a.next + 1) % ScoringWindow
	}
	if bad {
		a.recentBad++
	}
}

// rewardFailure is "" for a scored reward record, else "<status>: <reason>"; a record that does
// not decode counts as scored (the follower reports it separately).
func rewardFailure(suffix string, r *kgo.Record) string {
	var status topics.Status
	var reason string
	switch suffix {
	case topics.SuffixPredicted:
		p, err := topics.DecodePredictedRecord(r)
		if err != nil {
			return ""
		}
		status, reason = p.Status, p.Reason
	case topics.SuffixExecuted:
		e, err := topics.DecodeExecutedRecord(r)
		if err != nil {
			return ""
		}
		status, reason = e.Status, e.Reason
	}
	if status == topics.StatusOK || status == "" {
		return ""
	}
	return string(status) + ": " + reason
}

// scoringState must be called with mu held.
func (m *Model) scoringState() []ScoringHealth {
	out := []ScoringHealth{}
	for k, a := range m.scoring {
		h := ScoringHealth{Prefix: k.prefix, Stage: k.stage, Records: a.records, Failed: a.failed, LastError: a.lastError}
		if n := len(a.recent); n > 0 {
			h.RecentFailedShare = float64(a.recentBad) / float64(n)
		}
		out = append(out, h)
	}
	unscored, rollouts := m.unscoredState()
	for _, p := range unscored {
		out = append(out, ScoringHealth{Prefix: p, Stage: "world model and sandbox", Unscored: true, RecentFailedShare: 1,
			LastError: fmt.Sprintf("nothing scores this topic set's %d rollouts: no wmrl worldmodel or wmrl sandbox with --topic-prefix %s is running", rollouts[p], p)})
	}
	slices.SortFunc(out, func(a, b ScoringHealth) int {
		return cmp.Or(cmp.Compare(a.Prefix, b.Prefix), cmp.Compare(a.Stage, b.Stage))
	})
	return out
}

// wiringState must be called with mu held. It names each topic set with rollouts whose
// predicted-rewards topic no consumer group with live members reads: the correction consumer of
// that prefix is not running (or runs with another --topic-prefix), so no advantages will come.
// A finished demo's sets are named too: its consumers have stopped.
func (m *Model) wiringState() []string {
	out := []string{}
	if !m.groupsPolled {
		return out
	}
	read := map[string]bool{}
	for _, g := range m.groups {
		if g.Members > 0 && g.Error == "" {
			read[g.Topic] = true
		}
	}
	for name, c := range m.topicsSeen {
		prefix, suffix, ok := splitTopic(name)
		if !ok || suffix != topics.SuffixRollouts || c.records == 0 {
			continue
		}
		if !read[name] {
			out = append(out, fmt.Sprintf("nothing scores the rollouts of %s: no consumer group with live members reads %s (start `wmrl worldmodel --topic-prefix %s`, and `wmrl sandbox --topic-prefix %s` for anchor groups)", prefix, name, prefix, prefix))
		}
		if predicted := prefix + topics.SuffixPredicted; !read[predicted] {
			out = append(out, fmt.Sprintf("no consumer group with live members reads %s: is `wmrl correct --topic-prefix %s` running?", predicted, prefix))
		}
	}
	sort.Strings(out)
	return out
}
