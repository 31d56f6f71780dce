// Package hardening keeps a stage's secrets from other processes of the same machine once the
// stage has read them.
//
// Removing a secret from the environment (os.Unsetenv) keeps it from the stage's children, but
// not from /proc/<pid>/environ: that file shows the environment block the kernel set up at
// execve, which Unsetenv does not touch. What hides it (and /proc/<pid>/mem, maps, fd targets,
// ptrace) from other processes of the same uid is the process's "dumpable" flag: with it off the
// kernel requires CAP_SYS_PTRACE to read them. Root, or any process holding CAP_SYS_PTRACE,
// still reads everything, so code that must not see the secrets (the sandbox's jobs) has to run
// under another uid without capabilities as well.
//
// The system-specific calls live in one file per system: dumpable_linux.go and
// dumpable_other.go.
package hardening
