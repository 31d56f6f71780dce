package producers

import (
	"context"
	"strings"
	"testing"
)

func TestPolicyStepStamp(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name  string
		batch StepBatch
		lag   *int64
		want  *int64
	}{
		{"unknown", StepBatch{Step: 5}, nil, nil},
		{"backend's", StepBatch{Step: 5, PolicyStep: i64(2)}, i64(1), i64(2)},
		{"from the lag", StepBatch{Step: 5}, i64(2), i64(3)},
		{"on-policy", StepBatch{Step: 5}, i64(0), i64(5)},
		{"lag before the first checkpoint", StepBatch{Step: 1}, i64(3), i64(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policyStep(tt.batch, tt.lag)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("policyStep = %v, want %v", deref(got), deref(tt.want))
			}
		})
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestJSONLPolicyStep(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []any // policy step per batch (nil: absent)
		error string
	}{
		{"absent", `{"step": 1, "group_id": "q", "artifact": "a"}`, []any{nil}, ""},
		{"per step", `{"step": 1, "group_id": "q", "artifact": "a", "policy_step": 0}
{"step": 1, "group_id": "q", "artifact": "b", "policy_step": 0}
{"step": 2, "group_id": "q", "artifact": "c", "policy_step": 2}`, []any{int64(0), int64(2)}, ""},
		{"differs within a step", `{"step": 1, "group_id": "q", "artifact": "a", "policy_step": 0}
{"step": 1, "group_id": "q", "artifact": "b", "policy_step": 1}`, nil, "policy_step differs"},
		{"missing on one line", `{"step": 1, "group_id": "q", "artifact": "a", "policy_step": 0}
{"step": 1, "group_id": "q", "artifact": "b"}`, nil, "policy_step differs"},
		{"ahead of the step", `{"step": 1, "group_id": "q", "artifact": "a", "policy_step": 2}`, nil, "policy_step 2 must be in [0,step 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := NewJSONL(strings.NewReader(tt.in+"\n"), JSONLConfig{RunID: "r"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := drain(t, j)
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("err %v, want %q", err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d batches, want %d", len(got), len(tt.want))
			}
			for i, b := range got {
				if deref(b.PolicyStep) != tt.want[i] {
					t.Fatalf("batch %d: policy step %v, want %v", i, deref(b.PolicyStep), tt.want[i])
				}
			}
		})
	}
}

type steppedPolicy struct{}

func (steppedPolicy) SampleStep(context.Context, int64) ([]GroupSpec, error) {
	return []GroupSpec{{Rollouts: []RolloutSpec{{Artifact: []byte("x")}}}}, nil
}
func (steppedPolicy) PolicyStep(step int64) int64 { return max(0, step-1) }

func TestBuiltinPolicyStepper(t *testing.T) {
	b, err := NewBuiltin(steppedPolicy{}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sb.PolicyStep == nil || *sb.PolicyStep != 2 {
		t.Fatalf("policy step %v, want 2", deref(sb.PolicyStep))
	}
}
