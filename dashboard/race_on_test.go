//go:build race

package dashboard

// raceEnabled: the race detector multiplies memory use, so the RSS bound is checked only in the
// Makefile's pass without -race.
const raceEnabled = true
