//go:build !linux

package hardening

import (
	"errors"
	"fmt"
)

// SetNonDumpable is only implemented on Linux; elsewhere it returns an error that wraps
// errors.ErrUnsupported, and the environment of a stage stays readable by its uid (on macOS,
// ps -E shows it to the same user).
func SetNonDumpable() error {
	return fmt.Errorf("marking the process non-dumpable: %w on this system (Linux only)", errors.ErrUnsupported)
}

// Dumpable is only implemented on Linux (see SetNonDumpable).
func Dumpable() (bool, error) {
	return true, fmt.Errorf("reading the dumpable flag: %w on this system (Linux only)", errors.ErrUnsupported)
}
