package correction

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func mustNew(t testing.TB, cfg Config) *Corrector {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run folds steps into a fresh state with Correct and returns all rows and
// the final state.
func run(t testing.TB, c *Corrector, steps []Step) ([][]Row, *State) {
	t.Helper()
	st := c.NewState(steps[0].Run, steps[0].Stream)
	var all [][]Row
	for _, s := range steps {
		rows, next, err := c.Correct(st, s)
		if err != nil {
			t.Fatalf("step %d: %v", s.Step, err)
		}
		all = append(all, rows)
		st = next
	}
	return all, st
}

// shuffled returns a deep copy of s with groups and rollouts permuted.
func shuffled(s Step, r *splitMix64) Step {
	out := s
	out.Groups = slices.Clone(s.Groups)
	for i := len(out.Groups) - 1; i > 0; i-- {
		j := int(r.next() % uint64(i+1))
		out.Groups[i], out.Groups[j] = out.Groups[j], out.Groups[i]
	}
	return shuffledRollouts(out, r)
}

// TestCorrectOrderInvariant: the default mode's output depends on neither
// group nor rollout order; reference mode's (sequential over the manifest's
// groups, like the authors' loop) depends on no rollout order.
func TestCorrectOrderInvariant(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(), ReferenceConfig()} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			c := mustNew(t, cfg)
			steps := simulate("run", "s", 40, 3)
			r := &splitMix64{s: 99}
			perm := make([]Step, len(steps))
			for i, s := range steps {
				if cfg.Mode == ModeReference {
					perm[i] = shuffledRollouts(s, r)
				} else {
					perm[i] = shuffled(s, r)
				}
			}
			rowsA, stA := run(t, c, steps)
			rowsB, stB := run(t, c, perm)
			if stA.Digest() != stB.Digest() {
				t.Fatal("state digest depends on rollout order")
			}
			for v := range rowsA {
				if !slices.Equal(rowsA[v], rowsB[v]) {
					t.Fatalf("step %d rows depend on rollout order", v)
				}
			}
			if stA.FitVersion() == 0 {
				t.Fatal("run too short to fit a map")
			}
		})
	}
}

func TestCorrectStepSemantics(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	steps := simulate("run", "s", 30, 5)
	st := c.NewState("run", "s")
	for _, s := range steps {
		before := st.Digest()
		rows, next, err := c.Correct(st, s)
		if err != nil {
			t.Fatal(err)
		}
		if st.Digest() != before {
			t.Fatal("Correct mutated prev")
		}
		if !slices.IsSortedFunc(rows, func(a, b Row) int {
			return strings.Compare(a.GroupID+"\x00"+a.RolloutID, b.GroupID+"\x00"+b.RolloutID)
		}) {
			t.Fatal("rows not in canonical order")
		}
		for _, row := range rows {
			if row.CalibrationVersion != st.FitVersion() {
				t.Fatalf("row version %d, prev state %d", row.CalibrationVersion, st.FitVersion())
			}
			if row.PredictedOK && row.Calibrated != st.Calibrate(row.Predicted) {
				t.Fatal("row not calibrated with the state sealed after step-1")
			}
			if st.Pairs() < 200 && row.PredictedOK && row.Calibrated != row.Predicted {
				t.Fatal("map used before MinPairs pairs")
			}
			switch {
			case !row.Mask:
				if row.Advantage != 0 || row.Weight != 0 || row.Used != 0 {
					t.Fatalf("masked row carries values: %+v", row)
				}
			case row.Source == SourceAnchor:
				if row.Used != row.Executed || row.Weight != st.AnchorWeight() || !row.ExecutedOK {
					t.Fatalf("anchor row: %+v (weight in force %v)", row, st.AnchorWeight())
				}
			default:
				if row.Used != row.Calibrated || row.Weight != 1 || row.ExecutedOK {
					t.Fatalf("world-model row: %+v", row)
				}
			}
		}
		if next.SealedStep() != s.Step {
			t.Fatalf("sealed %d after step %d", next.SealedStep(), s.Step)
		}
		st = next
	}
	// 30 steps × 2 anchor groups × 8 rollouts, minus missing scores.
	if st.Pairs() < 400 || st.Pairs() > 480 || st.FitVersion() == 0 {
		t.Fatalf("pairs %d, fit version %d", st.Pairs(), st.FitVersion())
	}
	ratio, groups := st.NoiseRatio()
	if want := min(1+ratio, 4); st.AnchorWeight() != want || groups == 0 || ratio <= 0 {
		t.Fatalf("default weight %v, want clip(1+%v) = %v over %d groups", st.AnchorWeight(), ratio, want, groups)
	}
}

// TestReferenceWithinStep pins the authors' sequential semantics on a
// step small enough to follow by hand: the anchor group's fourth pair
// triggers the first fit in the middle of the step, so the world-model
// group before it in the manifest is calibrated with the identity and the
// one after it with the new map; breakpoints sit at the mean x of each
// populated bin (0.7 lies below the seventh edge 0.7000000000000001, so it
// shares bin 6 with 0.65); and anchor rows carry the weight frozen after the
// step's own observation.
func TestReferenceWithinStep(t *testing.T) {
	cfg := ReferenceConfig()
	cfg.MinPairs, cfg.RefitEvery, cfg.FreezeAfter = 4, 4, 1
	c := mustNew(t, cfg)
	wm := func(id string) Group {
		return Group{ID: id, Rollouts: []Rollout{{ID: "r0", Predicted: Reward{0.15, true}}, {ID: "r1", Predicted: Reward{0.85, true}}}}
	}
	anchor := Group{ID: "m", Anchor: true}
	for i, p := range [][2]float64{{0.1, 0}, {0.2, 0.1}, {0.65, 0.9}, {0.7, 1}} {
		anchor.Rollouts = append(anchor.Rollouts, Rollout{ID: fmt.Sprint("r", i), Predicted: Reward{p[0], true}, Executed: Reward{p[1], true}})
	}
	step := Step{Run: "run", Stream: "s", Groups: []Group{wm("z-before"), anchor, wm("a-after")}}
	rows, next, err := c.Correct(c.NewState("run", "s"), step)
	if err != nil {
		t.Fatal(err)
	}
	bx, by := next.Breakpoints()
	if !slices.Equal(bx, []float64{0.1, 0.2, 0.675}) || !slices.Equal(by, []float64{0, 0.1, 0.95}) {
		t.Fatalf("breakpoints %v %v, want bin means [0.1 0.2 0.675] [0 0.1 0.95]", bx, by)
	}
	w := next.AnchorWeight()
	if math.Abs(w-2) > 1e-15 {
		t.Fatalf("weight %v after the freeze, want 2", w)
	}
	for _, r := range rows {
		switch r.GroupID {
		case "z-before":
			if r.CalibrationVersion != 0 || r.Calibrated != r.Predicted {
				t.Fatalf("group before the refit: %+v", r)
			}
		case "a-after":
			if r.CalibrationVersion != 1 || r.Calibrated != next.Calibrate(r.Predicted) || r.Calibrated == r.Predicted {
				t.Fatalf("group after the refit: %+v", r)
			}
		case "m":
			if r.CalibrationVersion != 1 || r.Weight != w {
				t.Fatalf("anchor row: %+v, weight after the step %v", r, w)
			}
		}
	}
	if rows[0].GroupID != "z-before" || rows[len(rows)-1].GroupID != "a-after" {
		t.Fatal("rows not in manifest order")
	}
	// The manifest order is part of the input: with the anchor group first,
	// both world-model groups are calibrated with the new map.
	step.Groups[0], step.Groups[1] = step.Groups[1], step.Groups[0]
	rows2, next2, err := c.Correct(c.NewState("run", "s"), step)
	if err != nil {
		t.Fatal(err)
	}
	if next2.Digest() != next.Digest() {
		t.Fatal("the state after the step depends on where the world-model groups sit")
	}
	for _, r := range rows2 {
		if r.Source == SourceWorldModel && r.CalibrationVersion != 1 {
			t.Fatalf("after reordering: %+v", r)
		}
	}
}

func TestAblations(t *testing.T) {
	steps := simulate("run", "s", 30, 13)
	cfg := DefaultConfig()
	cfg.Debias = false
	rows, st := run(t, mustNew(t, cfg), steps)
	if st.FitVersion() != 0 || st.Pairs() == 0 {
		t.Fatalf("debias off: version %d pairs %d", st.FitVersion(), st.Pairs())
	}
	for _, rs := range rows {
		for _, r := range rs {
			if r.PredictedOK && r.Calibrated != r.Predicted {
				t.Fatal("debias off but calibrated != predicted")
			}
		}
	}
	cfg = DefaultConfig()
	cfg.Denoise = false
	rows, st = run(t, mustNew(t, cfg), steps)
	if st.AnchorWeight() != 1 {
		t.Fatalf("denoise off: weight %v", st.AnchorWeight())
	}
	for _, rs := range rows {
		for _, r := range rs {
			if r.Mask && r.Weight != 1 {
				t.Fatal("denoise off but weight != 1")
			}
		}
	}
}

func TestCorrectErrors(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	good := simulate("run", "s", 1, 1)[0]
	fresh := c.NewState("run", "s")
	edit := func(f func(s *Step)) Step {
		s := good
		s.Groups = slices.Clone(good.Groups)
		for i := range s.Groups {
			s.Groups[i].Rollouts = slices.Clone(s.Groups[i].Rollouts)
		}
		f(&s)
		return s
	}
	other := DefaultConfig()
	other.Eps = 1e-3
	tests := []struct {
		name    string
		st      *State
		step    Step
		want    error
		mention string
	}{
		{"nil state", nil, good, ErrNilState, ""},
		{"out of order", fresh, edit(func(s *Step) { s.Step = 1 }), ErrOutOfOrder, ""},
		{"config mismatch", mustNew(t, other).NewState("run", "s"), good, ErrConfigMismatch, ""},
		{"stream mismatch", mustNew(t, DefaultConfig()).NewState("run", "t"), good, ErrStreamMismatch, ""},
		{"duplicate group", fresh, edit(func(s *Step) { s.Groups[3].ID = "g1" }), ErrInvalidStep, `"g1"`},
		{"empty group id", fresh, edit(func(s *Step) { s.Groups[2].ID = "" }), ErrInvalidStep, "index 2"},
		{"duplicate rollout", fresh, edit(func(s *Step) { s.Groups[4].Rollouts[5].ID = "r2" }), ErrInvalidStep, `group "g4": duplicate rollout id "r2"`},
		{"empty rollout id", fresh, edit(func(s *Step) { s.Groups[4].Rollouts[5].ID = "" }), ErrInvalidStep, `group "g4"`},
		{"nan predicted", fresh, edit(func(s *Step) { s.Groups[5].Rollouts[1].Predicted = Reward{math.NaN(), true} }), ErrInvalidStep, `group "g5" rollout "r1"`},
		{"inf executed", fresh, edit(func(s *Step) { s.Groups[0].Rollouts[7].Executed = Reward{math.Inf(1), true} }), ErrInvalidStep, `group "g0" rollout "r7"`},
		{"huge score", fresh, edit(func(s *Step) { s.Groups[6].Rollouts[0].Predicted = Reward{1e300, true} }), ErrInvalidStep, `rollout "r0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, st, err := c.Correct(tt.st, tt.step)
			if !errors.Is(err, tt.want) || rows != nil || st != nil {
				t.Fatalf("got (%d rows, %v, %v), want error %v", len(rows), st, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %q does not mention %s", err, tt.mention)
			}
		})
	}
	// Missing scores are not errors, even if their value is NaN.
	ok := edit(func(s *Step) { s.Groups[5].Rollouts[1].Predicted = Reward{math.NaN(), false} })
	if _, _, err := c.Correct(fresh, ok); err != nil {
		t.Fatal(err)
	}
}

func TestMaskingInCorrect(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	step := Step{Run: "r", Stream: "s", Step: 0, Groups: []Group{
		{ID: "a", Anchor: true, Rollouts: []Rollout{
			{ID: "1", Predicted: Reward{0.2, true}, Executed: Reward{0.1, true}},
			{ID: "2", Predicted: Reward{0.8, true}, Executed: Reward{0, false}},
			{ID: "3", Predicted: Reward{0, false}, Executed: Reward{0.9, true}},
		}},
		{ID: "b", Rollouts: []Rollout{
			{ID: "1", Predicted: Reward{0.5, true}},
			{ID: "2", Predicted: Reward{0, false}},
		}},
	}}
	rows, st, err := c.Correct(c.NewState("r", "s"), step)
	if err != nil {
		t.Fatal(err)
	}
	masks := []bool{true, false, true, false, false}
	for i, r := range rows {
		if r.Mask != masks[i] {
			t.Fatalf("row %s/%s mask %v, want %v", r.GroupID, r.RolloutID, r.Mask, masks[i])
		}
	}
	if a := rows[0].Advantage; math.Abs(a+(0.4/(0.4+1e-4))) > 1e-12 {
		t.Fatalf("anchor advantage %v", a)
	}
	if st.Pairs() != 1 || st.TotalPairs() != 1 {
		t.Fatalf("pairs %d: only rollout a/1 has both scores", st.Pairs())
	}
}

func TestAdvanceMatchesCorrect(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(), ReferenceConfig()} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			c := mustNew(t, cfg)
			steps := simulate("run", "s", 25, 17)
			wantRows, want := run(t, c, steps)
			st := c.NewState("run", "s")
			var rows []Row
			for v, s := range steps {
				var err error
				if rows, err = c.Advance(st, s, rows[:0]); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(rows, wantRows[v]) {
					t.Fatalf("step %d: Advance and Correct rows differ", v)
				}
			}
			if st.Digest() != want.Digest() {
				t.Fatal("Advance and Correct diverge")
			}
			if _, err := c.Advance(st, steps[0], nil); !errors.Is(err, ErrOutOfOrder) {
				t.Fatalf("replayed step: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	bad := []Config{
		mod(func(c *Config) { c.Mode = 7 }),
		mod(func(c *Config) { c.Window = 0 }),
		mod(func(c *Config) { c.MinPairs = 6000 }),
		mod(func(c *Config) { c.MinPairs = 0 }),
		mod(func(c *Config) { c.RefitEvery = -1 }),
		mod(func(c *Config) { c.Mode = ModeReference; c.Bins = 0 }),
		mod(func(c *Config) { c.HalfLife = 0 }),
		mod(func(c *Config) { c.HalfLife = math.NaN() }),
		mod(func(c *Config) { c.FreezeAfter = -1 }),
		mod(func(c *Config) { c.WeightCap = 0.5 }),
		mod(func(c *Config) { c.Advantage = 9 }),
		mod(func(c *Config) { c.Eps = -1 }),
		mod(func(c *Config) { c.DDOF = 2 }),
	}
	for i, cfg := range bad {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("case %d: Validate() = %v", i, err)
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("case %d: New accepted an invalid config", i)
		}
	}
	for _, cfg := range []Config{DefaultConfig(), ReferenceConfig()} {
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// Every field enters the hash.
	base := DefaultConfig().Hash()
	for i, cfg := range append(bad, ReferenceConfig(),
		mod(func(c *Config) { c.Debias = false }), mod(func(c *Config) { c.Denoise = false }),
		mod(func(c *Config) { c.Bins = 11 }), mod(func(c *Config) { c.Advantage = DrGRPO })) {
		if cfg.Hash() == base {
			t.Errorf("modified config %d hashes like the default", i)
		}
	}
}

// TestCorrectThenAdvanceIsolation keeps a state returned by Correct and then
// advances its predecessor in place: the kept state must not change, even
// when its step added no pairs (so it briefly shared buffers).
func TestCorrectThenAdvanceIsolation(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	steps := simulate("run", "s", 40, 23)
	noPairs := steps[30]
	noPairs.Groups = slices.Clone(noPairs.Groups)
	for i := range noPairs.Groups {
		noPairs.Groups[i].Anchor = false
	}
	for _, s := range []Step{noPairs, steps[30]} {
		prev := c.NewState("run", "s")
		for _, st := range steps[:30] {
			if _, err := c.Advance(prev, st, nil); err != nil {
				t.Fatal(err)
			}
		}
		_, kept, err := c.Correct(prev, s)
		if err != nil {
			t.Fatal(err)
		}
		digest, sorted := kept.Digest(), slices.Clone(kept.sorted)
		for _, more := range steps[30:36] {
			if _, err := c.Advance(prev, more, nil); err != nil {
				t.Fatal(err)
			}
		}
		if kept.Digest() != digest || !slices.Equal(kept.sorted, sorted) {
			t.Fatal("advancing the predecessor in place changed a kept state")
		}
		want := kept.win.pairs()
		slices.SortFunc(want, cmpPair)
		if !slices.Equal(kept.sorted, want) {
			t.Fatal("kept state's sorted view no longer matches its window")
		}
	}
}

// TestCorrectConcurrentReaders runs Correct on one shared prev from several
// goroutines (run with -race): Correct must only read prev.
func TestCorrectConcurrentReaders(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	steps := simulate("run", "s", 21, 29)
	_, prev := run(t, c, steps[:20])
	digests := make([][32]byte, 4)
	done := make(chan error, len(digests))
	for i := range digests {
		go func() {
			_, next, err := c.Correct(prev, steps[20])
			if err == nil {
				digests[i] = next.Digest()
			}
			done <- err
		}()
	}
	for range digests {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range digests[1:] {
		if d != digests[0] {
			t.Fatal("concurrent Correct calls disagree")
		}
	}
}

// TestCorrectRetire: a chain of CorrectRetire gives the rows and states of a chain of Correct
// (the buffers it hands on never leak between states), a retired state stays readable as it was
// and refuses to advance, and a failed CorrectRetire retires nothing.
func TestCorrectRetire(t *testing.T) {
	small := func(cfg Config) Config { cfg.Window, cfg.MinPairs = 300, 40; return cfg }
	centred := small(DefaultConfig())
	centred.Map = MapCentred
	for name, cfg := range map[string]Config{
		"default": small(DefaultConfig()), "reference": small(ReferenceConfig()), "centred": centred, "default_5000": DefaultConfig(),
	} {
		t.Run(name, func(t *testing.T) {
			c := mustNew(t, cfg)
			a, b := c.NewState("run-0", "main"), c.NewState("run-0", "main")
			steps := simulate("run-0", "main", 150, 5)
			var scratch []Row // reused for the rows, as the consumer does
			var retired []*State
			var encs [][]byte
			for i, s := range steps {
				if i%40 == 7 {
					s.Groups = nil // an empty step: no merge, the sorted view is handed on as it is
				}
				ra, na, err := c.Correct(a, s)
				if err != nil {
					t.Fatal(err)
				}
				before := b.Encode()
				if _, _, err := c.CorrectRetire(b, Step{Run: "run-0", Stream: "main", Step: s.Step + 1}, nil); !errors.Is(err, ErrOutOfOrder) {
					t.Fatalf("step %d: out-of-order CorrectRetire: %v", i, err)
				}
				rb, nb, err := c.CorrectRetire(b, s, scratch[:0])
				if err != nil {
					t.Fatalf("step %d: a failed CorrectRetire retired the state: %v", i, err)
				}
				if fmt.Sprint(ra) != fmt.Sprint(rb) || !bytes.Equal(na.Encode(), nb.Encode()) || na.Digest() != nb.Digest() {
					t.Fatalf("step %d: CorrectRetire diverges from Correct", i)
				}
				if !bytes.Equal(b.Encode(), before) || b.Digest() != a.Digest() {
					t.Fatalf("step %d: the retired state changed", i)
				}
				if _, _, err := c.Correct(b, steps[min(i+1, len(steps)-1)]); !errors.Is(err, ErrRetired) {
					t.Fatalf("step %d: Correct of a retired state: %v", i, err)
				}
				if _, err := c.Advance(b, s, nil); !errors.Is(err, ErrRetired) {
					t.Fatalf("step %d: Advance of a retired state: %v", i, err)
				}
				retired = append(retired, b)
				encs = append(encs, before)
				a, b, scratch = na, nb, rb
			}
			// Later steps appended to the window chunks the retired states share; what they
			// read is untouched.
			for i, st := range retired {
				if !bytes.Equal(st.Encode(), encs[i]) {
					t.Fatalf("retired state of step %d changed later", i)
				}
			}
		})
	}
}
