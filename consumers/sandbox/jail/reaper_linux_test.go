package jail

import (
	"context"
	"os"
	"testing"
	"time"
)

// Every jailed job leaves its jail's init orphaned (bwrap's monitor exits first); the stage
// reaps them, so none piles up against the job uid's RLIMIT_NPROC ("Cannot fork" after a few
// hundred jobs under a PID 1 that reaps late).
func TestJailOrphansReaped(t *testing.T) {
	j, err := New(Config{Limits: DefaultLimits(), UseBwrap: true}, []string{"/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		o := j.Run(context.Background(), Job{Dir: t.TempDir(), Argv: []string{"/bin/true"}, Timeout: 30 * time.Second, StdoutMax: 1 << 10, StderrMax: 1 << 10})
		if o.SetupErr != nil || o.StartErr != nil || o.Signaled || o.ExitCode != 0 {
			t.Fatalf("job %d: %+v", i, o)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := orphanedJails(os.Getpid())
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orphaned jail inits are still zombies of the stage 5 s after their jobs", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func orphanedJails(self int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		var pid int
		for _, c := range e.Name() {
			if c < '0' || c > '9' {
				pid = -1
				break
			}
			pid = pid*10 + int(c-'0')
		}
		if pid > 0 && orphanedJail(pid, self) {
			n++
		}
	}
	return n
}
