package correct

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// drainDeadLetters returns the engine's pending dead letters as "topic/partition@offset reason",
// sorted, releasing them all.
func drainDeadLetters(t *testing.T, e *engine) []string {
	t.Helper()
	var out []string
	for _, r := range e.takeDeadLetters(nil) {
		d, err := topics.ParseDeadLetter(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s/%d@%d %s", d.SourceTopic, d.SourcePartition, d.SourceOffset, d.Reason))
	}
	slices.Sort(out)
	return out
}

func reasonsOf(dls []string) map[string]int {
	n := map[string]int{}
	for _, d := range dls {
		_, r, _ := strings.Cut(d, " ")
		n[r]++
	}
	return n
}

// The per-run limit is judged from the run's first incomplete step, not from what happens to be
// sealed: whether the engine seals after every record, every few records or only at the end (live
// polls and replay batches differ exactly so), the same records are dead-lettered and the same
// rows come out.
func TestEngineLimitsIndependentOfSealing(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 2, Steps: 12, Groups: 2, GroupSize: 2, AnchorEvery: 2, Streams: 1, Seed: 3})
	// Run r-0's step 0 misses one predicted reward until the very end: its later steps pile up.
	var input []*kgo.Record
	var withheld *kgo.Record
	for _, s := range steps {
		for _, r := range s.Records() {
			if withheld == nil && s.Run == "run-0" && s.Step == 0 && r.Topic == testNames.Predicted() {
				withheld = r
				continue
			}
			input = append(input, r)
		}
	}
	input = append(input, withheld)
	type outcome struct {
		dls    []string
		digest string
	}
	var ref *outcome
	for _, every := range []int{1, 7, 1000} {
		t.Run(fmt.Sprintf("seal every %d", every), func(t *testing.T) {
			e := testEngine(t, defaultCorr())
			e.limits.PendingStepsPerRun = 4
			f := newFeeder(e)
			var sealed []*sealed
			var dls []string
			for i, r := range input {
				f.add(r)
				if (i+1)%every == 0 {
					sealed = append(sealed, f.seal(t)...)
				}
				dls = append(dls, drainDeadLetters(t, e)...)
			}
			sealed = append(sealed, f.seal(t)...)
			slices.Sort(dls)
			got := &outcome{dls: dls, digest: topics.DigestRows(rowsOf(sealed))}
			// run-0 keeps steps 0-3 (step 0 completes last); steps 4-11 are refused. run-1 is whole.
			perStep := 1 + 2*2 + 2 // manifest, 4 predicted, 2 executed (one anchor group)
			if n := reasonsOf(dls)[reasonPendingSteps]; n != 8*perStep || len(dls) != n {
				t.Errorf("dead letters %v, want %d with reason %s", reasonsOf(dls), 8*perStep, reasonPendingSteps)
			}
			if n := len(rowsOf(sealed)); n != (4+12)*4 {
				t.Errorf("%d rows, want %d (run-0 steps 0-3, run-1 steps 0-11)", n, (4+12)*4)
			}
			if e.nSteps != e.bufferedSteps() || e.nSteps != 0 {
				t.Errorf("step counter %d, buffered %d, want 0", e.nSteps, e.bufferedSteps())
			}
			if ref == nil {
				ref = got
				return
			}
			if !slices.Equal(got.dls, ref.dls) || got.digest != ref.digest {
				t.Errorf("sealing every %d records changed the outcome: %d dead letters, digest %s; first: %d, %s",
					every, len(got.dls), got.digest, len(ref.dls), ref.digest)
			}
		})
	}
}

func manifestRecord(t *testing.T, run string, step int64, groups, size int) *kgo.Record {
	t.Helper()
	m := topics.StepManifest{RunID: run, Step: step, PolicyVersion: "p", CreatedAt: time.Unix(1_700_000_000, 0).UTC()}
	for g := range groups {
		m.Groups = append(m.Groups, topics.GroupManifest{GroupID: fmt.Sprintf("g%d", g), Stream: "s", Size: size})
	}
	r, err := testNames.StepRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func predictedRecord(t *testing.T, run string, step int64, group, rollout string) *kgo.Record {
	t.Helper()
	score := 0.5
	r, err := testNames.PredictedRecord(topics.PredictedReward{
		RolloutRef: topics.RolloutRef{RunID: run, Step: step, GroupID: group, RolloutID: rollout, Stream: "s", PolicyVersion: "p"},
		Status:     topics.StatusOK,
		Score:      &score,
		CreatedAt:  time.Unix(1_700_000_000, 0).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Claimed step sizes and the per-instance limits: what exceeds them is dead-lettered with the
// limit's reason, the rest is buffered, and the counters follow.
func TestEngineLimits(t *testing.T) {
	cases := []struct {
		name   string
		limits Limits
		input  func(t *testing.T) []*kgo.Record
		want   map[string]int // dead letters by reason
		steps  int            // buffered afterwards
	}{
		{name: "too many groups", limits: Limits{StepGroups: 4},
			input: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{manifestRecord(t, "a", 0, 4, 2), manifestRecord(t, "a", 1, 5, 2)}
			}, want: map[string]int{reasonStepTooLarge: 1}, steps: 1},
		{name: "too many rollouts", limits: Limits{StepRows: 8},
			input: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{manifestRecord(t, "a", 0, 4, 2), manifestRecord(t, "a", 1, 3, 3)}
			}, want: map[string]int{reasonStepTooLarge: 1}, steps: 1},
		{name: "rewards without a manifest", limits: Limits{StepRows: 2},
			input: func(t *testing.T) []*kgo.Record {
				var out []*kgo.Record
				for i := range 8 {
					out = append(out, predictedRecord(t, "a", 3, fmt.Sprintf("g%d", i%3), fmt.Sprintf("r%d", i)))
				}
				return out
			}, want: map[string]int{reasonStepTooLarge: 2}, steps: 1},
		{name: "instance steps", limits: Limits{PendingSteps: 3},
			input: func(t *testing.T) []*kgo.Record {
				var out []*kgo.Record
				for i := range 5 {
					out = append(out, manifestRecord(t, fmt.Sprintf("run%d", i), 0, 2, 2))
				}
				return out
			}, want: map[string]int{reasonInstancePending: 2}, steps: 3},
		{name: "instance groups", limits: Limits{PendingGroups: 10},
			input: func(t *testing.T) []*kgo.Record {
				var out []*kgo.Record
				for i := range 5 {
					out = append(out, manifestRecord(t, fmt.Sprintf("run%d", i), 0, 4, 2))
				}
				return out
			}, want: map[string]int{reasonInstancePending: 3}, steps: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, defaultCorr())
			l, err := tc.limits.withDefaults(false)
			if err != nil {
				t.Fatal(err)
			}
			e.limits = l
			f := newFeeder(e)
			f.add(tc.input(t)...)
			got := reasonsOf(drainDeadLetters(t, e))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("dead letters %v, want %v", got, tc.want)
			}
			if e.nSteps != tc.steps || e.bufferedSteps() != tc.steps {
				t.Errorf("buffered steps %d (counter %d), want %d", e.bufferedSteps(), e.nSteps, tc.steps)
			}
			groups := 0
			for _, rb := range e.runs {
				for _, b := range rb.steps {
					groups += len(b.groups)
				}
			}
			if e.nGroups != groups {
				t.Errorf("group counter %d, buffered %d", e.nGroups, groups)
			}
		})
	}
}
