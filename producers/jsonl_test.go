package producers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/topics"
)

// drain reads b to its end (io.EOF) and returns its steps, or those before the first other error.
func drain(t testing.TB, b Backend) ([]StepBatch, error) {
	t.Helper()
	var out []StepBatch
	for {
		sb, err := b.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, sb)
	}
}

func TestJSONLGroupsAndSteps(t *testing.T) {
	in := `{"step": 0, "group_id": "q1", "prompt": "p1", "artifact": "a"}
{"step": 0, "group_id": "q2", "prompt": "p2", "artifact": "b", "stream": "other"}

{"step": 0, "group_id": "q1", "prompt": "p1", "artifact": "c", "rollout_id": "custom", "meta": {"k": "v"}}
{"step": 2, "group_id": "q1", "prompt": "p1", "artifact": "d", "policy_version": "v2"}
{"step": 2, "group_id": "q1", "prompt": "p1", "artifact_uri": "file:///claims/x", "artifact_sha256": "` + strings.Repeat("a", 64) + `", "policy_version": "v2"}
`
	j, err := NewJSONL(strings.NewReader(in), JSONLConfig{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := drain(t, j)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Step != 0 || got[1].Step != 2 || got[1].PolicyVersion != "v2" {
		t.Fatalf("steps %+v", got)
	}
	s0 := got[0]
	if len(s0.Groups) != 2 || s0.Groups[0].GroupID != "0-q1" || s0.Groups[1].GroupID != "0-q2" || s0.Groups[1].Stream != "other" {
		t.Fatalf("step 0 groups %+v", s0.Groups)
	}
	q1 := s0.Groups[0]
	if len(q1.Rollouts) != 2 || string(q1.Rollouts[0].Artifact) != "a" || q1.Rollouts[1].RolloutID != "custom" || q1.Rollouts[1].Meta["k"] != "v" || q1.Prompt != "p1" {
		t.Errorf("group 0-q1 %+v", q1)
	}
	s2 := got[1].Groups[0]
	if s2.GroupID != "2-q1" || len(s2.Rollouts) != 2 || s2.Rollouts[1].ArtifactURI != "file:///claims/x" {
		t.Errorf("step 2 group %+v", s2)
	}
}

func TestJSONLFullRecords(t *testing.T) {
	frac := 0.5
	run := "r"
	var lines []string
	gid := "7-g"
	anchor := topics.IsAnchor(run, gid, frac)
	// Indices out of order: the backend places rollouts by index.
	for _, i := range []int{1, 0} {
		rec, err := topics.EncodeRollout(topics.Rollout{RolloutRef: topics.RolloutRef{RunID: run, Step: 7, GroupID: gid, RolloutID: gid + "-r" + string(rune('0'+i)), Stream: "main"},
			Anchor: anchor, Index: i, Artifact: "art" + string(rune('0'+i))})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(rec))
	}
	j, _ := NewJSONL(strings.NewReader(strings.Join(lines, "\n")), JSONLConfig{RunID: run, AnchorFraction: frac})
	got, err := drain(t, j)
	if err != nil {
		t.Fatal(err)
	}
	g := got[0].Groups[0]
	if g.GroupID != gid || string(g.Rollouts[0].Artifact) != "art0" || g.Rollouts[0].RolloutID != "7-g-r0" || string(g.Rollouts[1].Artifact) != "art1" {
		t.Errorf("group %+v", g)
	}
}

func TestJSONLErrors(t *testing.T) {
	full := func(run string, anchor bool, index int) string {
		b, err := topics.EncodeRollout(topics.Rollout{RolloutRef: topics.RolloutRef{RunID: run, Step: 0, GroupID: "g", RolloutID: "g-" + string(rune('0'+index)), Stream: "main"},
			Anchor: anchor, Index: index})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ok := `{"step": 0, "group_id": "q", "artifact": "a"}`
	tests := []struct {
		name, in, want string
	}{
		{"not json", "{step: 0}", "line 1: not JSON"},
		{"array", `[1]`, "line 1: want a JSON object"},
		{"trailing", ok + ` {}`, "line 1: data after"},
		{"unknown field", `{"step": 0, "group_id": "q", "artifcat": "a"}`, `line 1: unknown field "artifcat"`},
		{"case-folded field", `{"STEP": 0, "group_id": "q"}`, `line 1: unknown field "STEP"`},
		{"duplicate key", `{"step": 0, "step": 1, "group_id": "q"}`, `line 1: duplicate key "step"`},
		{"missing step", `{"group_id": "q"}`, "line 1: step is required"},
		{"negative step", `{"step": -1, "group_id": "q"}`, "line 1: step -1 is negative"},
		{"fractional step", `{"step": 1.5, "group_id": "q"}`, "line 1: json"},
		{"missing group", `{"step": 0}`, "line 1: group_id"},
		{"bad group", `{"step": 0, "group_id": "a/b"}`, "line 1: group_id"},
		{"bad stream", `{"step": 0, "group_id": "q", "stream": "s s"}`, "line 1: stream"},
		{"both artifacts", `{"step": 0, "group_id": "q", "artifact": "a", "artifact_uri": "file:///x", "artifact_sha256": "` + strings.Repeat("a", 64) + `"}`, "exclusive"},
		{"uri without digest", `{"step": 0, "group_id": "q", "artifact_uri": "file:///x"}`, "needs artifact_sha256"},
		{"digest without uri", `{"step": 0, "group_id": "q", "artifact": "a", "artifact_sha256": "` + strings.Repeat("a", 64) + `"}`, "only for artifact_uri"},
		{"step goes back", ok + "\n" + `{"step": 1, "group_id": "q"}` + "\n" + ok, "line 3: step 0 after step 1"},
		{"prompt differs", ok + "\n" + `{"step": 0, "group_id": "q", "prompt": "other"}`, "line 2: group 0-q: prompt or stream differs from line 1"},
		{"policy differs", ok + "\n" + `{"step": 0, "group_id": "r", "policy_version": "v9"}`, "line 2: policy_version"},
		{"full: wrong run", full("other", false, 0), `line 1: run_id "other"`},
		{"full: wrong anchor", full("r", true, 0), "line 1: anchor=true"},
		{"full: bad index", full("r", false, 1), "line 1: group g: index 1"},
		{"full: broken", `{"schema": "wmrl.rollout.v1", "run_id": 3}`, "line 1: "},
		{"mixed forms", full("r", false, 0) + "\n" + `{"step": 0, "group_id": "q"}` + "\n" + `{"step": 0, "group_id": "g"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := NewJSONL(strings.NewReader(tt.in), JSONLConfig{RunID: "r", AnchorFraction: 0})
			if err != nil {
				t.Fatal(err)
			}
			_, err = drain(t, j)
			if tt.want == "" {
				// "0-g" (short) and "g" (full) are distinct groups: no error is right.
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, ErrLine) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrLine containing %q", err, tt.want)
			}
		})
	}
}

func TestJSONLLineTooLong(t *testing.T) {
	j, _ := NewJSONL(strings.NewReader(`{"step": 0, "group_id": "q", "artifact": "`+strings.Repeat("x", 200)+`"}`), JSONLConfig{RunID: "r", MaxLineBytes: 100})
	if _, err := drain(t, j); !errors.Is(err, ErrLine) || !strings.Contains(err.Error(), "line 1: longer than 100 bytes") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzJSONL: arbitrary input either fails with a line error or yields batches the generator's
// own checks would accept structurally (groups non-empty, steps increasing).
func FuzzJSONL(f *testing.F) {
	f.Add(`{"step": 0, "group_id": "q", "artifact": "a"}` + "\n" + `{"step": 1, "group_id": "q"}`)
	f.Add(`{"schema": "wmrl.rollout.v1"}`)
	f.Add(`{"step": 0, "group_id": "q", "meta": {"a": "b"}}`)
	f.Add("\n\n{}\n")
	f.Fuzz(func(t *testing.T, in string) {
		j, err := NewJSONL(strings.NewReader(in), JSONLConfig{RunID: "r", AnchorFraction: 0.5, MaxLineBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		batches, err := drain(t, j)
		if err != nil {
			return
		}
		last := int64(-1)
		for _, b := range batches {
			if b.Step <= last || len(b.Groups) == 0 {
				t.Fatalf("batch %+v after step %d", b, last)
			}
			last = b.Step
			for _, g := range b.Groups {
				if !topics.ValidID(g.GroupID) || len(g.Rollouts) == 0 {
					t.Fatalf("group %+v", g)
				}
			}
		}
	})
}

// TestJSONLBadLineDropsWholeGroup: with OnBadLine a bad line leaves out the whole group it names
// (before, the group went on with the lines that did parse: 2 of 3 rollouts), a step left
// without groups is skipped, and a bad line whose group cannot be read stops the input. Without
// OnBadLine the first bad line stops it, naming the line and field, before its step is returned.
func TestJSONLBadLineDropsWholeGroup(t *testing.T) {
	in := strings.Join([]string{
		`{"step": 0, "group_id": "q1", "artifact": "a"}`,
		`{"step": 0, "group_id": "q2", "artifact": "a"}`,
		`{"step": 0, "group_id": "q1", "artifact": "b", "sorce": "typo"}`,
		`{"step": 0, "group_id": "q1", "artifact": "c"}`,
		`{"step": 1, "group_id": "q1", "artifact": 7}`,
		`{"step": 2, "group_id": "q1", "artifact": "d"}`,
	}, "\n")
	var bad []int
	b, err := NewJSONL(strings.NewReader(in), JSONLConfig{RunID: "r", OnBadLine: func(line int, _ []byte, err error) error {
		bad = append(bad, line)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	steps, err := drain(t, b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		for _, g := range s.Groups {
			got = append(got, fmt.Sprintf("%s:%d", g.GroupID, len(g.Rollouts)))
		}
	}
	if strings.Join(got, ",") != "0-q2:1,2-q1:1" || fmt.Sprint(bad) != "[3 5]" {
		t.Errorf("groups %v (bad lines %v), want 0-q2:1,2-q1:1 (bad lines [3 5])", got, bad)
	}
	if d := b.DroppedGroups(); fmt.Sprint(d) != "[step 0 group 0-q1 step 1 group 1-q1]" {
		t.Errorf("DroppedGroups %q", d)
	}

	b, _ = NewJSONL(strings.NewReader(`{"step": 0, "group_id": "q1"}`+"\n"+`{"step": 0, "group_`), JSONLConfig{RunID: "r",
		OnBadLine: func(int, []byte, error) error { return nil }})
	if _, err := drain(t, b); !errors.Is(err, ErrLine) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "cannot be read") {
		t.Errorf("unreadable bad line: %v", err)
	}

	b, _ = NewJSONL(strings.NewReader(in), JSONLConfig{RunID: "r"})
	steps, err = drain(t, b)
	if len(steps) != 0 || !errors.Is(err, ErrLine) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), `"sorce"`) {
		t.Errorf("without OnBadLine: %d steps, err %v; want none and line 3's field named", len(steps), err)
	}
}
