package dashboard

import (
	"encoding/json"
	"math"
	"testing"
)

func TestNewHeadlineArmNullsWhatWasNotReached(t *testing.T) {
	tests := []struct {
		name string
		arm  HeadlineArm
		want string
	}{
		{"all reached", NewHeadlineArm("wmrl", 0.67, 496, 192, 4.67),
			`{"arm":"wmrl","final_score":0.67,"executions":496,"executions_to_target":192,"speedup":4.67}`},
		{"never reached the target", NewHeadlineArm("pure-wm", 0.66, 0, math.NaN(), math.Inf(1)),
			`{"arm":"pure-wm","final_score":0.66,"executions":0,"executions_to_target":null,"speedup":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.arm)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got %s\nwant %s", b, tt.want)
			}
		})
	}
}
