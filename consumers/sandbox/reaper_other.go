//go:build !linux

package sandbox

// reapJailOrphans: the jail (bubblewrap) exists on Linux only.
func reapJailOrphans() {}
