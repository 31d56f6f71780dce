package topics

import (
	"errors"
	"testing"
)

// ParseGroupID inverts GroupID, and whatever it accepts GroupID rebuilds verbatim.
func FuzzParseGroupID(f *testing.F) {
	for _, s := range []string{"0-0", "12-3", "-1-2", "1--2", "01-1", "1-01", "+1-1", "9223372036854775807-1", "a-b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		step, j, err := ParseGroupID(id)
		if err != nil {
			if !errors.Is(err, ErrGroupID) {
				t.Fatalf("%q: error %v is not ErrGroupID", id, err)
			}
			return
		}
		if step < 0 || j < 0 || GroupID(step, j) != id {
			t.Fatalf("%q parsed to (%d, %d)", id, step, j)
		}
	})
}
