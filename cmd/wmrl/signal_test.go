package main

import (
	"bufio"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envSignalChild makes the test binary act as a command whose shutdown never finishes.
const envSignalChild = "WMRL_TEST_SIGNAL_CHILD"

// A second Ctrl-C forces exit: the first cancels the command's context (here the command then
// hangs, as a drain waiting on a judge that never answers does), the second ends the process at
// once with 130. The child is this test binary in signalChild mode, so the real signal
// delivery and the real os.Exit are under test.
func TestSecondSignalForcesExit(t *testing.T) {
	if os.Getenv(envSignalChild) == "1" {
		signalChild()
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSecondSignalForcesExit$")
			cmd.Env = append(os.Environ(), envSignalChild+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			waitLine := func(want string) {
				t.Helper()
				deadline := time.After(20 * time.Second)
				for {
					select {
					case l, ok := <-lines:
						if !ok {
							t.Fatalf("child ended before %q", want)
						}
						if strings.Contains(l, want) {
							return
						}
					case <-deadline:
						t.Fatalf("no %q from the child", want)
					}
				}
			}
			waitLine("child ready")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			waitLine("child stopping")
			// The first signal did not end it: it is stuck in its shutdown.
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Fatalf("child exited after one signal: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				ee, ok := err.(*exec.ExitError)
				if want := 128 + int(sig); !ok || ee.ExitCode() != want {
					t.Fatalf("child after the second %v: %v, want exit status %d", sig, err, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("child still running 10 s after the second %v", sig)
			}
		})
	}
}

func signalChild() {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	ctx, cancel := forceOnSecondSignal(log, os.Exit)
	defer cancel()
	os.Stdout.WriteString("child ready\n")
	<-ctx.Done()
	os.Stdout.WriteString("child stopping\n")
	select {} // a shutdown that never finishes
}
