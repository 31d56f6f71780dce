package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// Runs are listed newest first; an end record ends every stream of its run in its topic set,
// streams seen after it included; manifests count groups and anchor groups per step and run.
func TestModelEndsOrderAndAnchorGroups(t *testing.T) {
	m := NewModel("p.", 10)
	t0 := time.Unix(5000, 0)
	snap := func(run, stream string, at time.Time) {
		m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: run, Stream: stream, Step: 0}, at)
	}
	snap("a", "main", t0.Add(time.Hour))
	snap("b", "main", t0)
	snap("c", "main", t0.Add(time.Minute))
	m.End("p.calibration.v1", "p.", topics.CalibrationEnd{RunID: "b", LastStep: 0, EndedAt: t0.Add(2 * time.Second), Reason: topics.EndReasonIdle})
	snap("b", "side", t0) // a stream first seen after its run's end
	m.End("q.calibration.v1", "q.", topics.CalibrationEnd{RunID: "a", LastStep: 0, EndedAt: t0, Reason: topics.EndReasonMarker})
	m.Manifest("p.steps.v1", "p.", topics.StepManifest{RunID: "c", Step: 0, Groups: []topics.GroupManifest{
		{GroupID: "g0", Stream: "main", Size: 4, Anchor: true}, {GroupID: "g1", Stream: "main", Size: 4}, {GroupID: "g2", Stream: "main", Size: 4, Anchor: true}}}, t0)
	m.Manifest("p.steps.v1", "p.", topics.StepManifest{RunID: "c", Step: 1, Groups: []topics.GroupManifest{{GroupID: "g3", Stream: "main", Size: 4, Anchor: true}}}, t0)
	st := m.State()
	var ids []string
	for _, r := range st.Runs {
		ids = append(ids, r.ID)
	}
	if got, want := strings.Join(ids, " "), "p.a/main p.c/main p.b/main p.b/side"; got != want {
		t.Fatalf("runs in order %q, want newest first %q", got, want)
	}
	for _, r := range st.Runs {
		ended := r.Run == "b"
		if (r.Ended != nil) != ended {
			t.Errorf("%s: ended %+v, want ended=%v (an end in another topic set does not count)", r.ID, r.Ended, ended)
		}
		if ended && (r.Ended.Reason != topics.EndReasonIdle || r.Ended.LastStep != 0) {
			t.Errorf("%s: end %+v", r.ID, r.Ended)
		}
		if r.ID == "p.c/main" {
			if r.Groups != 4 || r.AnchorGroups != 3 || r.Steps[0].Groups != 3 || r.Steps[0].AnchorGroups != 2 {
				t.Errorf("%s: groups %d anchor %d (step 0: %d, %d), want 4, 3 (3, 2)", r.ID, r.Groups, r.AnchorGroups, r.Steps[0].Groups, r.Steps[0].AnchorGroups)
			}
		}
	}
}

// A missing head is "pending" right after a step seals, "lost" once a sealed step is older
// than headGrace or Redis held the head before, and "gone" for an ended run.
func TestModelRedisMissing(t *testing.T) {
	now := time.Unix(10000, 0)
	cases := []struct {
		name    string
		setup   func(m *Model, k runKey)
		want    string
		wantErr string
	}{
		{"just sealed", func(m *Model, k runKey) {
			m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: k.run, Stream: k.stream}, now.Add(-time.Second))
		}, HeadPending, "no head record yet"},
		{"sealed long ago", func(m *Model, k runKey) {
			m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: k.run, Stream: k.stream}, now.Add(-time.Minute))
		}, HeadLost, "Redis lost this run's head; rebuilding"},
		{"held before", func(m *Model, k runKey) {
			m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: k.run, Stream: k.stream}, now)
			m.SetRedis(k, &RedisHead{Prefix: "wmrl", State: HeadOK})
		}, HeadLost, "Redis lost this run's head; rebuilding"},
		{"ended", func(m *Model, k runKey) {
			m.Snapshot("p.calibration.v1", "p.", topics.CalibrationSnapshot{RunID: k.run, Stream: k.stream}, now.Add(-time.Hour))
			m.End("p.calibration.v1", "p.", topics.CalibrationEnd{RunID: k.run, EndedAt: now.Add(-time.Hour), Reason: topics.EndReasonMarker})
		}, HeadGone, "run ended (marker, after step 0): Redis no longer holds its head"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewModel("p.", 10)
			m.now = func() time.Time { return now }
			k := runKey{"p.", "r", "main"}
			c.setup(m, k)
			m.RedisMissing(k, "wmrl")
			h := m.State().Runs[0].Redis
			if h == nil || h.State != c.want || !strings.HasPrefix(h.Error, c.wantErr) {
				t.Fatalf("head %+v, want state %s and error %q…", h, c.want, c.wantErr)
			}
		})
	}
}
