//go:build race

package sandbox

// raceEnabled: the race-instrumented helper binary (TSan) cannot start under
// an address-space limit and starts slowly.
const raceEnabled = true
