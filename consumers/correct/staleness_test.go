package correct

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

func TestStalenessOf(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name         string
		step         int64
		policy       *int64
		maxStaleness int64
		want         staleness
	}{
		{"no policy_step", 5, nil, 1, staleness{}},
		{"on-policy", 5, i64(5), 1, staleness{steps: 0, known: true}},
		{"at the bound", 5, i64(4), 1, staleness{steps: 1, known: true}},
		{"past the bound", 5, i64(3), 1, staleness{steps: 2, known: true, masked: true}},
		{"bound off", 5, i64(0), 0, staleness{steps: 5, known: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &topics.StepManifest{Step: tt.step, PolicyStep: tt.policy}
			if got := stalenessOf(m, tt.maxStaleness); got != tt.want {
				t.Fatalf("stalenessOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// withPolicyStep re-encodes a synthetic step's manifest with a policy_step lag steps behind it.
func withPolicyStep(t *testing.T, names topics.Names, s SynthStep, lag int64) SynthStep {
	t.Helper()
	m, err := topics.DecodeStep(s.Manifest.Value)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Step - lag
	m.PolicyStep = &ps
	if s.Manifest, err = names.StepRecord(m); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEngineStaleness(t *testing.T) {
	wl := SynthConfig{Runs: 1, Steps: 4, Groups: 3, GroupSize: 4, AnchorEvery: 2, Seed: 9}
	// lag per step; -1 leaves policy_step out.
	lags := []int64{-1, 0, 1, 3}
	tests := []struct {
		name         string
		maxStaleness int64
		stale        []bool // per step: every row masked as stale
	}{
		{"bound off", 0, []bool{false, false, false, false}},
		{"bound 1", 1, []bool{false, false, false, true}},
		{"bound 3", 3, []bool{false, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := synth(t, wl)
			for i, lag := range lags {
				if lag >= 0 {
					steps[i] = withPolicyStep(t, testNames, steps[i], lag)
				}
			}
			corr, err := correction.New(defaultCorr())
			if err != nil {
				t.Fatal(err)
			}
			m, _ := newMetrics(prometheus.NewRegistry())
			e := newEngine(corr, testNames, tt.maxStaleness, replayLimits(t, Limits{}), m)
			f := newFeeder(e)
			f.add(flatten(steps)...)
			sealed := f.seal(t)
			if len(sealed) != len(lags) {
				t.Fatalf("%d steps sealed, want %d", len(sealed), len(lags))
			}
			// The same inputs with policy_step left out entirely: the sealed states must agree.
			plain := testEngine(t, defaultCorr())
			pf := newFeeder(plain)
			pf.add(flatten(synth(t, wl))...)
			plainSealed := pf.seal(t)
			for i, s := range sealed {
				var stale int
				for _, r := range s.rows {
					if (lags[i] >= 0) != r.StalenessOK || (r.StalenessOK && r.Staleness != lags[i]) {
						t.Fatalf("step %d: staleness %d (ok %v), want lag %d", i, r.Staleness, r.StalenessOK, lags[i])
					}
					if r.MaskReason == topics.MaskStale {
						stale++
						if r.Mask || r.Advantage != 0 || !r.PredictedOK {
							t.Fatalf("step %d: stale row %+v must be masked with its scores kept", i, r)
						}
					}
				}
				if want := map[bool]int{true: len(s.rows)}[tt.stale[i]]; stale != want || s.staleRows != want {
					t.Fatalf("step %d: %d rows masked as stale (counted %d), want %d", i, stale, s.staleRows, want)
				}
				for k, snap := range s.snaps {
					if snap.Digest != plainSealed[i].snaps[k].Digest {
						t.Fatalf("step %d stream %s: sealed state differs from the run without policy_step", i, snap.Stream)
					}
				}
				// Rows without policy_step are exactly the rows of the run that never had it.
				if lags[i] < 0 && topics.DigestRows(s.rows) != topics.DigestRows(plainSealed[i].rows) {
					t.Fatalf("step %d: rows without policy_step changed", i)
				}
			}
		})
	}
}

// A redelivered manifest that disagrees on policy_step is a conflict, not a duplicate.
func TestEngineManifestPolicyStepConflict(t *testing.T) {
	steps := synth(t, SynthConfig{Runs: 1, Steps: 1, Groups: 1, GroupSize: 2, Seed: 1})
	e := testEngine(t, defaultCorr())
	f := newFeeder(e)
	f.add(steps[0].Manifest)
	f.add(withPolicyStep(t, testNames, steps[0], 0).Manifest)
	f.add(steps[0].Rewards...)
	if s := f.seal(t); len(s) != 1 || s[0].rows[0].StalenessOK {
		t.Fatalf("sealed %d steps; the first manifest (no policy_step) must win", len(s))
	}
	dl := e.takeDeadLetters(e.holdback())
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	if d, err := topics.ParseDeadLetter(dl[0]); err != nil || d.Reason != "conflict" {
		t.Fatalf("dead letter %+v, %v", d, err)
	}
}

// TestConsumerMasksStaleStepsOnBroker runs the consumer against the real broker and Redis: a
// step whose policy is two steps behind is masked under --max-staleness 1, with its staleness in
// the v2 advantage rows, and a replay with the same bound reproduces the digest.
func TestConsumerMasksStaleStepsOnBroker(t *testing.T) {
	seeds, rdb, names := onBroker(t)
	prefix := names.Prefix

	wl := SynthConfig{Runs: 1, Steps: 3, Groups: 2, GroupSize: 4, AnchorEvery: 2, Seed: 5, RunPrefix: "stale"}
	steps := synthOn(t, names, wl)
	// Step 0 has no policy_step (v1 rows), step 1 is one step behind, step 2 two steps behind.
	steps[1] = withPolicyStep(t, names, steps[1], 1)
	steps[2] = withPolicyStep(t, names, steps[2], 2)
	testenv.Produce(t, seeds, flatten(steps))

	cc := correction.DefaultConfig()
	cfg := testConsumerConfig(seeds, names, rdb, cc)
	cfg.Group, cfg.TransactionalID, cfg.RedisPrefix = prefix+"g", prefix+"tx", prefix+"redis"
	cfg.MaxStaleness = 1
	stop := startConsumer(t, cfg)
	perStep := wl.Groups * wl.GroupSize
	rd := newAdvantageReader(t, seeds, names.Advantages(), true)
	rd.readUntil(t, wl.Steps*perStep, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, rd.rows, wl.Steps*perStep)
	for _, r := range rd.rows {
		switch r.Step {
		case 0:
			if r.UsesV2() {
				t.Fatalf("step 0 (no policy_step) row uses v2 columns: %+v", r)
			}
		case 1:
			if !r.StalenessOK || r.Staleness != 1 || r.MaskReason != "" {
				t.Fatalf("step 1 row: staleness %d ok %v reason %q, want 1, true, none", r.Staleness, r.StalenessOK, r.MaskReason)
			}
		case 2:
			if !r.StalenessOK || r.Staleness != 2 || r.MaskReason != topics.MaskStale || r.Mask || r.Advantage != 0 || !r.PredictedOK {
				t.Fatalf("step 2 row %+v: want staleness 2 masked as stale with its scores", r)
			}
		}
	}
	var unmasked1 int
	for _, r := range rd.rows {
		if r.Step == 1 && r.Mask {
			unmasked1++
		}
	}
	if unmasked1 == 0 {
		t.Fatal("step 1 (within the bound) has no unmasked row")
	}
	live := topics.DigestRows(rd.rows)

	for _, tc := range []struct {
		maxStaleness int64
		same         bool
	}{{1, true}, {0, false}} {
		rc := ReplayConfig{
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Names: names, Run: "stale-0",
			Correction: cc, MaxStaleness: tc.maxStaleness, Timeout: 60 * time.Second, Logger: quietLogger(),
		}
		if !tc.same {
			// Another bound than the live one is refused, unless asked for.
			if _, err := Replay(context.Background(), rc, func(int64, []topics.AdvantageRow) error { return nil }); !errors.Is(err, ErrSettingsChanged) {
				t.Fatalf("replay with --max-staleness %d (live 1): %v, want ErrSettingsChanged", tc.maxStaleness, err)
			}
			rc.AllowConfigChange = true
		}
		res, err := Replay(context.Background(), rc, func(int64, []topics.AdvantageRow) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if (res.Digest == live) != tc.same {
			t.Fatalf("replay with --max-staleness %d: digest %s, live %s, want equal: %v", tc.maxStaleness, res.Digest, live, tc.same)
		}
	}
}
