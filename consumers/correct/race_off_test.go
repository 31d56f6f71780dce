//go:build !race

package correct

const raceEnabled = false
