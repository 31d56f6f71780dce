package producers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/topics"
)

var genNow = time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)

// testPolicy is a tiny deterministic policy: groups of g rollouts whose artifacts encode their
// position, one of them (optionally) large.
type testPolicy struct {
	groups, g int
	bigAt     int // rollout index with a large artifact, -1 for none
}

func (p testPolicy) SampleStep(_ context.Context, step int64) ([]GroupSpec, error) {
	out := make([]GroupSpec, p.groups)
	for j := range out {
		out[j].Prompt = fmt.Sprintf("task %d", j)
		for i := range p.g {
			art := fmt.Sprintf(`{"score": 0.%d%d}`, j, i)
			if i == p.bigAt {
				art = strings.Repeat("#", 300) + "\n" + art
			}
			out[j].Rollouts = append(out[j].Rollouts, RolloutSpec{Artifact: []byte(art)})
		}
	}
	return out, nil
}

func (testPolicy) PolicyVersion(step int64) string { return fmt.Sprintf("ckpt-%d", step) }

func newCluster(t *testing.T, names topics.Names) []kgo.Opt {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, names.All()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

// readAll reads n records from the given topics, in per-partition order.
func readAll(t *testing.T, seeds []kgo.Opt, n int, topicNames ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, seeds...), kgo.ConsumeTopics(topicNames...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), n)
		}
		out = append(out, f.Records()...)
	}
	return out
}

func TestGeneratorBuiltin(t *testing.T) {
	names := topics.NewNames("t.")
	seeds := newCluster(t, names)
	store, err := artifact.NewStore(filepath.Join(t.TempDir(), "claims"), 0)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := NewBuiltin(testPolicy{groups: 4, g: 3, bigAt: 2}, 5, 2)
	if err != nil {
		t.Fatal(err)
	}
	const run, frac = "run-a", 0.5
	g, err := New(backend, Config{RunID: run, AnchorFraction: frac, Names: names, KafkaOpts: seeds, InlineLimit: 100,
		Artifacts: store, Now: func() time.Time { return genNow }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 2 || st.Groups != 8 || st.Rollouts != 24 || st.ByReference != 8 {
		t.Fatalf("stats %+v", st)
	}
	recs := readAll(t, seeds, 26, names.Rollouts(), names.Steps())
	manifests := map[int64]topics.StepManifest{}
	anchors := 0
	for _, rec := range recs {
		if string(rec.Key) != run {
			t.Errorf("key %q, want the run id", rec.Key)
		}
		if rec.Topic == names.Steps() {
			m, err := topics.DecodeStep(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			manifests[m.Step] = m
			continue
		}
		r, err := topics.DecodeRollout(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		var j, i int
		if _, err := fmt.Sscanf(r.RolloutID, fmt.Sprintf("%d-%%d-%%d", r.Step), &j, &i); err != nil || r.GroupID != fmt.Sprintf("%d-%d", r.Step, j) || r.Index != i {
			t.Errorf("ids %s/%s index %d do not follow <step>-<j>[-<i>]", r.GroupID, r.RolloutID, r.Index)
		}
		if r.Anchor != topics.IsAnchor(run, r.GroupID, frac) {
			t.Errorf("%s: anchor %v disagrees with IsAnchor", r.GroupID, r.Anchor)
		}
		if r.Anchor && i == 0 {
			anchors++
		}
		if r.PolicyVersion != fmt.Sprintf("ckpt-%d", r.Step) || r.Stream != "main" || !r.CreatedAt.Equal(genNow) || r.Prompt != fmt.Sprintf("task %d", j) {
			t.Errorf("labels of %s: %+v", r.RolloutID, r)
		}
		want := fmt.Sprintf(`{"score": 0.%d%d}`, j, i)
		if i == 2 {
			if r.Artifact != "" || r.ArtifactURI == "" {
				t.Fatalf("%s: large artifact not sent by reference: %+v", r.RolloutID, r)
			}
			data, err := store.Get(context.Background(), r.ArtifactURI, r.ArtifactSHA256)
			if err != nil || !strings.HasSuffix(string(data), want) || r.ArtifactSize != int64(len(data)) {
				t.Errorf("%s: claim check gives %q, %v", r.RolloutID, data, err)
			}
		} else if r.Artifact != want || r.ArtifactSHA256 != artifact.Digest([]byte(want)) {
			t.Errorf("%s: inline artifact %q sha %s", r.RolloutID, r.Artifact, r.ArtifactSHA256)
		}
	}
	if len(manifests) != 2 {
		t.Fatalf("manifests for steps %v, want 5 and 6", manifests)
	}
	manifestAnchors := 0
	for step, m := range manifests {
		if m.PolicyVersion != fmt.Sprintf("ckpt-%d", step) || len(m.Groups) != 4 {
			t.Errorf("manifest %+v", m)
		}
		for j, gm := range m.Groups {
			if gm.GroupID != fmt.Sprintf("%d-%d", step, j) || gm.Size != 3 || gm.Anchor != topics.IsAnchor(run, gm.GroupID, frac) || gm.Stream != "main" {
				t.Errorf("manifest group %+v", gm)
			}
			if gm.Anchor {
				manifestAnchors++
			}
		}
	}
	if manifestAnchors != anchors || anchors != st.AnchorGroups {
		t.Errorf("anchor groups: manifests %d, rollouts %d, stats %d", manifestAnchors, anchors, st.AnchorGroups)
	}
}

// TestGeneratorManifestAfterRollouts reads both topics of the run's partition by offset: the
// manifest's produce started only after every rollout of the step was acknowledged, so its
// broker timestamp cannot precede theirs.
func TestGeneratorManifestAfterRollouts(t *testing.T) {
	names := topics.NewNames("t.")
	seeds := newCluster(t, names)
	backend, _ := NewBuiltin(testPolicy{groups: 8, g: 8, bigAt: -1}, 0, 1)
	g, err := New(backend, Config{RunID: "r", Names: names, KafkaOpts: seeds})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, seeds, 65, names.Rollouts(), names.Steps())
	var manifest *kgo.Record
	var last time.Time
	for _, r := range recs {
		if r.Topic == names.Steps() {
			manifest = r
		} else if r.Timestamp.After(last) {
			last = r.Timestamp
		}
	}
	if manifest == nil || manifest.Timestamp.Before(last) {
		t.Fatalf("manifest at %v, last rollout at %v", manifest.Timestamp, last)
	}
}

// scriptedBackend yields fixed batches.
type scriptedBackend struct{ batches []StepBatch }

func (s *scriptedBackend) Next(context.Context) (StepBatch, error) {
	if len(s.batches) == 0 {
		return StepBatch{}, errors.New("backend exhausted without EOF")
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

func oneGroup(gid string, arts ...string) GroupSpec {
	g := GroupSpec{GroupID: gid}
	for _, a := range arts {
		g.Rollouts = append(g.Rollouts, RolloutSpec{Artifact: []byte(a)})
	}
	return g
}

func TestGeneratorRejectsBadBatches(t *testing.T) {
	names := topics.NewNames("t.")
	seeds := newCluster(t, names)
	tests := []struct {
		name    string
		batches []StepBatch
		store   bool
		want    error
	}{
		{"no groups", []StepBatch{{Step: 0}}, false, ErrBadBatch},
		{"empty group", []StepBatch{{Step: 0, Groups: []GroupSpec{{GroupID: "g"}}}}, false, ErrBadBatch},
		{"duplicate group", []StepBatch{{Step: 0, Groups: []GroupSpec{oneGroup("g", "a"), oneGroup("g", "b")}}}, false, ErrBadBatch},
		{"group reused in a later step", []StepBatch{{Step: 0, Groups: []GroupSpec{oneGroup("g", "a")}}, {Step: 1, Groups: []GroupSpec{oneGroup("g", "a")}}}, false, ErrBadBatch},
		{"step not increasing", []StepBatch{{Step: 3, Groups: []GroupSpec{oneGroup("a", "a")}}, {Step: 3, Groups: []GroupSpec{oneGroup("b", "a")}}}, false, ErrBadBatch},
		{"negative step", []StepBatch{{Step: -1, Groups: []GroupSpec{oneGroup("a", "a")}}}, false, ErrBadBatch},
		{"bad group id", []StepBatch{{Step: 0, Groups: []GroupSpec{oneGroup("a/b", "a")}}}, false, topics.ErrInvalid},
		{"large artifact without store", []StepBatch{{Step: 0, Groups: []GroupSpec{oneGroup("a", strings.Repeat("x", 200))}}}, false, ErrConfig},
		{"binary artifact without store", []StepBatch{{Step: 0, Groups: []GroupSpec{oneGroup("a", "\xff\xfe")}}}, false, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(&scriptedBackend{batches: tt.batches}, Config{RunID: "r", Names: names, KafkaOpts: seeds, InlineLimit: 100})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if _, err := g.Run(context.Background()); !errors.Is(err, tt.want) {
				t.Fatalf("Run = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNewConfigErrors(t *testing.T) {
	b := &scriptedBackend{}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no run", Config{}},
		{"bad run", Config{RunID: "a b"}},
		{"bad stream", Config{RunID: "r", Stream: "x/y"}},
		{"fraction above 1", Config{RunID: "r", AnchorFraction: 1.5}},
		{"fraction NaN", Config{RunID: "r", AnchorFraction: nan()}},
		{"inline over limit", Config{RunID: "r", InlineLimit: topics.MaxInlineArtifact + 1}},
	}
	for _, tt := range tests {
		if _, err := New(b, tt.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", tt.name, err)
		}
	}
	if _, err := New(nil, Config{RunID: "r"}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil backend: %v", err)
	}
}

func nan() float64 { var z float64; return z / z }
