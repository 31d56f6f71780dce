package worldmodel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	tests := []struct {
		s     Status
		str   string
		valid bool
	}{
		{StatusOK, "ok", true},
		{StatusTimeout, "timeout", true},
		{StatusError, "error", true},
		{StatusInvalid, "invalid", true},
		{Status(""), "", false},
		{Status("missing"), "missing", false},
	}
	for _, tt := range tests {
		if tt.s.String() != tt.str || tt.s.Valid() != tt.valid {
			t.Errorf("Status %q: String %q Valid %v; want %q %v", string(tt.s), tt.s.String(), tt.s.Valid(), tt.str, tt.valid)
		}
	}
}

func TestBuiltinScorer(t *testing.T) {
	boom := errors.New("proxy model crashed")
	tests := []struct {
		name       string
		lo, hi     float64
		predict    PredictFunc
		wantStatus Status
		wantScore  float64
		wantReason string
	}{
		{name: "ok", predict: constant(0.6), wantStatus: StatusOK, wantScore: 0.6},
		{name: "bounds inclusive", predict: constant(1), wantStatus: StatusOK, wantScore: 1},
		{name: "above range", predict: constant(1.01), wantStatus: StatusInvalid, wantReason: "score 1.01 outside [0, 1]"},
		{name: "below range", predict: constant(-0.5), wantStatus: StatusInvalid, wantReason: "score -0.5 outside [0, 1]"},
		{name: "nan", predict: constant(math.NaN()), wantStatus: StatusInvalid, wantReason: "not finite"},
		{name: "inf", predict: constant(math.Inf(1)), wantStatus: StatusInvalid, wantReason: "not finite"},
		{name: "custom range", lo: -1, hi: 1, predict: constant(-0.5), wantStatus: StatusOK, wantScore: -0.5},
		{name: "error", predict: failing(boom), wantStatus: StatusError, wantReason: "proxy model crashed"},
		{name: "own deadline", predict: failing(fmt.Errorf("fit: %w", context.DeadlineExceeded)),
			wantStatus: StatusTimeout, wantReason: "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewBuiltinScorer(tt.predict, tt.lo, tt.hi)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Score(context.Background(), testInput)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus || res.Score != tt.wantScore || res.Attempts != 1 ||
				!strings.Contains(res.Reason, tt.wantReason) {
				t.Errorf("got %+v; want status %s score %v reason containing %q", res, tt.wantStatus, tt.wantScore, tt.wantReason)
			}
		})
	}
}

func TestBuiltinScorerShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewBuiltinScorer(func(ctx context.Context, _ Input) (float64, error) {
		cancel()
		<-ctx.Done()
		return 0, ctx.Err()
	}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Score(ctx, testInput); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := s.Score(ctx, testInput); !errors.Is(err, context.Canceled) {
		t.Fatalf("on done ctx: err = %v, want context.Canceled", err)
	}
}

func TestNewBuiltinScorerRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		predict PredictFunc
		lo, hi  float64
	}{
		{"nil predict", nil, 0, 1},
		{"empty range", constant(0), 2, 2},
		{"inverted range", constant(0), 1, 0},
		{"nan bound", constant(0), math.NaN(), 1},
		{"infinite bound", constant(0), 0, math.Inf(1)},
	}
	for _, tt := range tests {
		if _, err := NewBuiltinScorer(tt.predict, tt.lo, tt.hi); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
}

func constant(v float64) PredictFunc {
	return func(context.Context, Input) (float64, error) { return v, nil }
}

func failing(err error) PredictFunc {
	return func(context.Context, Input) (float64, error) { return 0, err }
}

// gatedScorer blocks each Score call until its rollout's gate is released, tracking how many
// calls are in flight.
type gatedScorer struct {
	gates    map[string]chan struct{}
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	entered  chan string
}

func newGatedScorer(ids []string) *gatedScorer {
	g := &gatedScorer{gates: make(map[string]chan struct{}), entered: make(chan string, len(ids))}
	for _, id := range ids {
		g.gates[id] = make(chan struct{})
	}
	return g
}

func (g *gatedScorer) Score(ctx context.Context, in Input) (Result, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	g.entered <- in.RolloutID
	select {
	case <-g.gates[in.RolloutID]:
		return Result{Score: 0.5, Status: StatusOK, Attempts: 1}, nil
	case <-ctx.Done():
		return Result{}, context.Cause(ctx)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r-%d", i)
	}
	return out
}

func feed(ids []string) <-chan Job[int] {
	in := make(chan Job[int], len(ids))
	for i, id := range ids {
		in <- Job[int]{Input: Input{RolloutID: id}, Ref: i}
	}
	close(in)
	return in
}

// TestScoreAllCompletionOrder releases jobs in reverse order and expects results in exactly that
// order: the pool must not serialise completions on input order.
func TestScoreAllCompletionOrder(t *testing.T) {
	const n = 6
	names := ids(n)
	g := newGatedScorer(names)
	out := make(chan Done[int])
	errc := make(chan error, 1)
	go func() { errc <- ScoreAll(context.Background(), g, n, feed(names), out) }()
	for range n {
		<-g.entered
	}
	for i := n - 1; i >= 0; i-- {
		close(g.gates[names[i]])
		d := <-out
		if d.Ref != i || d.Input.RolloutID != names[i] || d.Err != nil || d.Result.Status != StatusOK {
			t.Fatalf("after releasing job %d got %+v", i, d)
		}
	}
	if _, open := <-out; open {
		t.Fatal("out not closed after all jobs")
	}
	if err := <-errc; err != nil {
		t.Fatalf("ScoreAll: %v", err)
	}
}

// TestScoreAllBoundsConcurrency holds conc-1 jobs and cycles the rest through the last free slot:
// the peak must be exactly conc, never more.
func TestScoreAllBoundsConcurrency(t *testing.T) {
	const n, conc = 12, 3
	names := ids(n)
	g := newGatedScorer(names)
	out := make(chan Done[int], n)
	errc := make(chan error, 1)
	go func() { errc <- ScoreAll(context.Background(), g, conc, feed(names), out) }()
	var held []string
	for i := range n {
		id := <-g.entered
		if i < conc-1 {
			held = append(held, id)
			continue
		}
		close(g.gates[id])
	}
	for _, id := range held {
		close(g.gates[id])
	}
	count := 0
	for d := range out {
		if d.Err != nil || d.Result.Status != StatusOK {
			t.Errorf("job %d: %+v", d.Ref, d)
		}
		count++
	}
	if err := <-errc; err != nil {
		t.Fatalf("ScoreAll: %v", err)
	}
	if count != n {
		t.Errorf("%d results, want %d", count, n)
	}
	if got := g.maxSeen.Load(); got != conc {
		t.Errorf("max in flight %d, want exactly %d", got, conc)
	}
}

func TestScoreAllCancel(t *testing.T) {
	names := ids(5)
	g := newGatedScorer(names)
	ctx, cancel := context.WithCancel(context.Background())
	in := make(chan Job[int], len(names))
	for i, id := range names {
		in <- Job[int]{Input: Input{RolloutID: id}, Ref: i}
	}
	// in stays open: only cancellation can end the run.
	out := make(chan Done[int], len(names))
	errc := make(chan error, 1)
	go func() { errc <- ScoreAll(ctx, g, 2, in, out) }()
	<-g.entered
	<-g.entered
	cancel()
	var done []Done[int]
	for d := range out {
		done = append(done, d)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("ScoreAll = %v, want context.Canceled", err)
	}
	if len(done) < 2 {
		t.Fatalf("%d results, want one for each of the 2 started jobs", len(done))
	}
	for _, d := range done {
		if !errors.Is(d.Err, context.Canceled) {
			t.Errorf("job %d: Err = %v, want context.Canceled", d.Ref, d.Err)
		}
	}
	if left := len(in) + len(done); left != len(names) {
		t.Errorf("%d jobs reported + %d left in input, want %d in total", len(done), len(in), len(names))
	}
}

func TestScoreAllRejectsZeroConcurrency(t *testing.T) {
	out := make(chan Done[int])
	err := ScoreAll(context.Background(), newGatedScorer(nil), 0, feed(nil), out)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if _, open := <-out; open {
		t.Fatal("out not closed")
	}
}

func TestOffsetTracker(t *testing.T) {
	type op struct {
		kind   byte // 's' start, 'f' finish
		offset int64
		ok     bool // Finish's expected return
	}
	s := func(o int64) op { return op{'s', o, false} }
	f := func(o int64) op { return op{'f', o, true} }
	fBad := func(o int64) op { return op{'f', o, false} }
	tests := []struct {
		name         string
		ops          []op
		want         int64
		wantInFlight int
	}{
		{name: "nothing started", want: -1},
		{name: "one in flight", ops: []op{s(10)}, want: 10, wantInFlight: 1},
		{name: "one finished", ops: []op{s(10), f(10)}, want: 11},
		{name: "in order", ops: []op{s(0), s(1), s(2), f(0), f(1)}, want: 2, wantInFlight: 1},
		{name: "out of order head pending", ops: []op{s(0), s(1), s(2), f(2), f(1)}, want: 0, wantInFlight: 1},
		{name: "out of order all done", ops: []op{s(0), s(1), s(2), f(2), f(1), f(0)}, want: 3},
		{name: "gap in offsets", ops: []op{s(5), s(9), f(5)}, want: 9, wantInFlight: 1},
		{name: "gap all done jumps past gap", ops: []op{s(5), s(9), f(9), f(5)}, want: 10},
		{name: "middle pending", ops: []op{s(0), s(1), s(2), s(3), f(0), f(2), f(3)}, want: 1, wantInFlight: 1},
		{name: "duplicate start is idempotent", ops: []op{s(4), s(4), f(4)}, want: 5},
		{name: "finish unknown offset", ops: []op{s(4), fBad(3)}, want: 4, wantInFlight: 1},
		{name: "double finish", ops: []op{s(4), f(4), fBad(4)}, want: 5},
		{name: "redelivered offset holds back", ops: []op{s(0), s(1), f(0), f(1), s(0)}, want: 0, wantInFlight: 1},
		{name: "redelivered then finished", ops: []op{s(0), s(1), f(0), f(1), s(0), f(0)}, want: 2},
		{name: "start below finished ones", ops: []op{s(7), f(7), s(3)}, want: 3, wantInFlight: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr OffsetTracker
			for i, o := range tt.ops {
				switch o.kind {
				case 's':
					tr.Start(o.offset)
				case 'f':
					if got := tr.Finish(o.offset); got != o.ok {
						t.Fatalf("op %d: Finish(%d) = %v, want %v", i, o.offset, got, o.ok)
					}
				}
			}
			if got := tr.Committable(); got != tt.want {
				t.Errorf("Committable() = %d, want %d", got, tt.want)
			}
			if got := tr.InFlight(); got != tt.wantInFlight {
				t.Errorf("InFlight() = %d, want %d", got, tt.wantInFlight)
			}
		})
	}
}

func TestOffsetTrackerNegativeOffsetPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Start(-1) did not panic")
		}
	}()
	var tr OffsetTracker
	tr.Start(-1)
}

// TestOffsetTrackerConcurrent finishes a large window in random order from many goroutines and
// checks the committable offset never passes an unfinished one.
func TestOffsetTrackerConcurrent(t *testing.T) {
	const n = 2000
	var tr OffsetTracker
	finished := make([]atomic.Bool, n)
	for o := range int64(n) {
		tr.Start(o)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for o := int64(w); o < n; o += 8 {
				finished[o].Store(true)
				tr.Finish(o)
			}
		})
	}
	stop := make(chan struct{})
	checked := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				checked <- nil
				return
			default:
			}
			c := tr.Committable()
			for o := int64(0); o < c && o < n; o++ {
				if !finished[o].Load() {
					checked <- fmt.Errorf("committable %d passes unfinished offset %d", c, o)
					return
				}
			}
			time.Sleep(time.Microsecond)
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	if got := tr.Committable(); got != n {
		t.Errorf("Committable() = %d after all finished, want %d", got, n)
	}
}
