package topics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrGroupID reports a group id that is not a default one ("<step>-<j>"), from ParseGroupID.
var ErrGroupID = errors.New("topics: not a default group id")

// GroupID is the default id of group j of a step, "<step>-<j>": the id the generator gives a
// group whose GroupSpec.GroupID is empty. Callers that rebuild a run's ids (the simulation, the
// demo) use it so they cannot drift from the generator.
func GroupID(step int64, j int) string {
	return strconv.FormatInt(step, 10) + "-" + strconv.Itoa(j)
}

// RolloutID is the default id of rollout i of a group, "<group_id>-<i>": the id the generator
// gives a rollout whose RolloutSpec.RolloutID is empty.
func RolloutID(groupID string, i int) string { return groupID + "-" + strconv.Itoa(i) }

// ParseGroupID is the inverse of GroupID. It accepts only the canonical form GroupID produces
// (no sign, no leading zeros), so a parsed id maps back to exactly one (step, j); anything else
// is ErrGroupID.
func ParseGroupID(id string) (step int64, j int, err error) {
	s, js, ok := strings.Cut(id, "-")
	if ok {
		var err1, err2 error
		step, err1 = strconv.ParseInt(s, 10, 64)
		j, err2 = strconv.Atoi(js)
		if err1 == nil && err2 == nil && step >= 0 && j >= 0 && GroupID(step, j) == id {
			return step, j, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: %q", ErrGroupID, id)
}
