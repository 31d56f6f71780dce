package worldmodel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
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
