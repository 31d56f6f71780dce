//go:build race

package correct

// raceEnabled: the race detector multiplies memory use, so the RSS bound is not checked under it.
const raceEnabled = true
