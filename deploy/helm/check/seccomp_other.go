//go:build !linux

package main

import "errors"

// SandboxSeccompProfile needs moby's default profile, which is built for Linux only.
func SandboxSeccompProfile() ([]byte, error) {
	return nil, errors.New("the sandbox seccomp profile is generated on Linux only")
}
