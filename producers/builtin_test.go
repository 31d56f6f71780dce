package producers

import (
	"context"
	"errors"
	"io"
	"testing"
)

// eofAfter ends the run itself after n steps.
type eofAfter struct{ n int64 }

func (p eofAfter) SampleStep(_ context.Context, step int64) ([]GroupSpec, error) {
	if step >= p.n {
		return nil, io.EOF
	}
	return []GroupSpec{oneGroup("", "a")}, nil
}

func TestBuiltinBackend(t *testing.T) {
	tests := []struct {
		name         string
		policy       BuiltinPolicy
		first, steps int64
		want         []int64
		version      string
	}{
		{"bounded", testPolicy{groups: 1, g: 1, bigAt: -1}, 3, 2, []int64{3, 4}, "ckpt-3"},
		{"policy ends the run", eofAfter{n: 3}, 0, 0, []int64{0, 1, 2}, ""},
		{"steps cap before policy EOF", eofAfter{n: 10}, 1, 1, []int64{1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBuiltin(tt.policy, tt.first, tt.steps)
			if err != nil {
				t.Fatal(err)
			}
			steps, err := drain(t, b)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, sb := range steps {
				got = append(got, sb.Step)
			}
			if len(steps) > 0 && steps[0].PolicyVersion != tt.version {
				t.Errorf("policy version %q, want %q", steps[0].PolicyVersion, tt.version)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("steps %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("steps %v, want %v", got, tt.want)
				}
			}
		})
	}
	if _, err := NewBuiltin(nil, 0, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("nil policy: %v", err)
	}
	if _, err := NewBuiltin(eofAfter{}, -1, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("negative first step: %v", err)
	}
}
