package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestBuiltinExecutor(t *testing.T) {
	tests := []struct {
		name     string
		fn       ExecFunc
		parent   func() (context.Context, context.CancelFunc)
		want     Status
		score    float64
		reason   string
		canceled bool
	}{
		{name: "ok", fn: func(context.Context, Job) (float64, error) { return 0.8, nil }, want: StatusOK, score: 0.8},
		{name: "error", fn: func(context.Context, Job) (float64, error) { return 0, errors.New("diverged") }, want: StatusError, reason: "diverged"},
		{name: "invalid artifact", fn: func(context.Context, Job) (float64, error) {
			return 0, fmt.Errorf("parse solution: %w", ErrInvalidArtifact)
		}, want: StatusInvalid, reason: "invalid artifact"},
		{name: "out of range", fn: func(context.Context, Job) (float64, error) { return -0.1, nil }, want: StatusInvalid, reason: "outside [0, 1]"},
		{name: "nan", fn: func(context.Context, Job) (float64, error) { return math.NaN(), nil }, want: StatusInvalid, reason: "not finite"},
		{name: "honours deadline", fn: func(ctx context.Context, _ Job) (float64, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}, want: StatusTimeout, reason: "exceeded timeout 50ms"},
		{name: "ignores deadline but is late", fn: func(ctx context.Context, _ Job) (float64, error) {
			time.Sleep(80 * time.Millisecond)
			return 0.9, nil
		}, want: StatusTimeout},
		{name: "panic", fn: func(context.Context, Job) (float64, error) { panic("task bug") }, want: StatusError, reason: "builtin task panicked: task bug"},
		{name: "parent canceled", fn: func(ctx context.Context, _ Job) (float64, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}, parent: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(10*time.Millisecond, cancel)
			return ctx, cancel
		}, want: StatusError, reason: "canceled", canceled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBuiltinExecutor(tc.fn, BuiltinConfig{Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.parent != nil {
				ctx, cancel = tc.parent()
			}
			defer cancel()
			r := b.Execute(ctx, Job{RolloutID: "x"})
			if r.Status != tc.want || r.Score != tc.score || !strings.Contains(r.Reason, tc.reason) || r.Canceled() != tc.canceled {
				t.Errorf("got %+v", r)
			}
			if r.ExitCode != -1 || r.Duration <= 0 {
				t.Errorf("exit %d duration %s", r.ExitCode, r.Duration)
			}
		})
	}
}

func TestNewBuiltinExecutorErrors(t *testing.T) {
	ok := func(context.Context, Job) (float64, error) { return 0, nil }
	for _, tc := range []struct {
		name string
		fn   ExecFunc
		cfg  BuiltinConfig
	}{
		{"nil func", nil, BuiltinConfig{}},
		{"negative timeout", ok, BuiltinConfig{Timeout: -1}},
		{"empty range", ok, BuiltinConfig{ScoreMin: 2, ScoreMax: 1}},
	} {
		if _, err := NewBuiltinExecutor(tc.fn, tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}
