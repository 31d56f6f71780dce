//go:build !race

package topicread

const raceEnabled = false
