package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

// The budget attacks of the hostile suite (issue 34, item 4): one job must not
// starve another, a job refused processes by the host is an infrastructure
// error rather than a grade, and a job cannot raise its own limits.

// hostileHonestForks is how many subprocesses the honest neighbour runs; it
// scores hostileHonestScore only when every one of them started and exited 0,
// and 0 otherwise — the honest grader whose failing tests the finding recorded
// as "status ok, score 0".
const (
	hostileHonestForks = 20
	hostileHonestScore = 0.75
)

// hostileBombHold is how long the neighbour bomb holds its processes once it
// can fork no more: long enough for the honest job to run inside the window.
const hostileBombHold = 4 * time.Second

// hostileRaiseForks is how many processes raise-limits tries to hold after
// raising its limits: more than DefaultLimits' Processes.
const hostileRaiseForks = 400

// hostileBudgetAttack runs in the jail: "attack bomb-hold SLEEPARG",
// "attack honest-forks" or "attack raise-limits".
func hostileBudgetAttack(args []string) int {
	switch args[0] {
	case "bomb-hold":
		// Hold as many `sleep SLEEPARG` processes as the limits allow (SLEEPARG
		// is unique per run, so the host can count them), then keep them while
		// the honest job runs. Go, not sh: dash gives up at the first refused fork.
		n, err := holdSleepers(args[1], hostileForks)
		fmt.Fprintf(os.Stderr, "bomb forks=%d (%v)\n", n, err)
		time.Sleep(hostileBombHold)
	case "honest-forks":
		failed := 0
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range hostileHonestForks {
			c := exec.Command("/bin/sh", "-c", "exit 0")
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "honest: start:", err)
				failed++
				continue
			}
			wg.Go(func() {
				if err := c.Wait(); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		score := hostileHonestScore
		if failed > 0 {
			score = 0 // the tests "failed": what an honest grader reports
		}
		fmt.Fprintf(os.Stderr, "honest failed=%d\n", failed)
		fmt.Printf("{\"score\": %v}\n", score)
		return 0
	case "raise-limits":
		raiseOwnLimits()
		n, err := holdSleepers("30", hostileRaiseForks)
		fmt.Fprintf(os.Stderr, "forks=%d (%v)\n", n, err)
	}
	fmt.Println(`{"score": 0}`)
	return 0
}

// holdSleepers starts up to n `sleep arg` processes and leaves them running.
func holdSleepers(arg string, n int) (int, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return 0, err
	}
	for i := range n {
		if err := exec.Command(sleep, arg).Start(); err != nil {
			return i, err
		}
	}
	return n, nil
}

// raiseOwnLimits tries everything a job could do to lift its budget: "max"
// into the limit files of each of its cgroups, and every finite hard rlimit
// raised by one. It prints "RAISED …" for a success, "raise …: err" otherwise.
func raiseOwnLimits() {
	report := func(what string, err error) {
		if err == nil {
			fmt.Fprintln(os.Stderr, "RAISED", what)
		} else {
			fmt.Fprintf(os.Stderr, "raise %s: %v\n", what, err)
		}
	}
	mounts := cgroupMountsFromMountinfo()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		report("read /proc/self/cgroup", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		key := parts[1]
		if parts[0] == "0" {
			key = "cgroup2"
		}
		for _, ctrl := range strings.Split(key, ",") {
			mnt, ok := mounts[ctrl]
			if !ok {
				report(ctrl+" cgroup", errors.New("not mounted in the job"))
				continue
			}
			dir := filepath.Join(mnt, parts[2])
			for file, v := range map[string]string{"pids.max": "max", "memory.max": "max", "memory.swap.max": "max", "memory.limit_in_bytes": "-1", "memory.memsw.limit_in_bytes": "-1"} {
				p := filepath.Join(dir, file)
				if _, err := os.Stat(p); err != nil {
					continue
				}
				report(p, os.WriteFile(p, []byte(v), 0))
			}
		}
	}
	for name, res := range map[string]int{"RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CPU": unix.RLIMIT_CPU, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE} {
		var r unix.Rlimit
		if err := unix.Getrlimit(res, &r); err != nil || r.Max == unix.RLIM_INFINITY {
			fmt.Fprintf(os.Stderr, "raise %s: no hard limit to raise (%v)\n", name, err)
			continue
		}
		report(fmt.Sprintf("%s hard %d", name, r.Max), unix.Setrlimit(res, &unix.Rlimit{Cur: r.Max + 1, Max: r.Max + 1}))
	}
}

// neighbourRun is what the fork bomb next to an honest job did, judged by
// two rows: starve-neighbour (the honest score) and bomb-scored (how the
// bomb was recorded).
type neighbourRun struct {
	bomb, honest Result
}

// runNeighbours runs a fork bomb in one slot of a two-slot pool and, once it
// holds its processes, an honest job in the other.
func runNeighbours(e *CommandExecutor) (neighbourRun, error) {
	pool, err := NewPool(e, 2)
	if err != nil {
		return neighbourRun{}, err
	}
	// A sleep argument unique to this run marks the bomb's processes on the host.
	sleepArg := fmt.Sprintf("%d.%09d", 40+os.Getpid()%50, time.Now().Nanosecond())
	var run neighbourRun
	bombDone := make(chan error, 1)
	go func() {
		var err error
		run.bomb, err = pool.Submit(context.Background(), Job{Artifact: []byte("attack bomb-hold " + sleepArg)})
		bombDone <- err
	}()
	waitBombHolds(sleepArg)
	honest, err := pool.Submit(context.Background(), Job{Artifact: []byte("attack honest-forks")})
	run.honest = honest
	if berr := <-bombDone; err == nil {
		err = berr
	}
	for _, p := range cmdlineProcs(sleepArg) {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	return run, err
}

// waitBombHolds waits until the bomb's sleepers stop growing in number (it
// has reached its limit) or 10 s have passed.
func waitBombHolds(sleepArg string) {
	last, stable := -1, 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := len(cmdlineProcs(sleepArg))
		if n > 0 && n == last {
			if stable++; stable >= 3 {
				return
			}
		} else {
			stable = 0
		}
		last = n
	}
}

// judgeNeighbours is the outcome of the two neighbour rows.
func judgeNeighbours(attack string, run neighbourRun) (hostileOutcome, string) {
	detail := fmt.Sprintf("honest: %s %v %q; bomb: %s %q: %s", run.honest.Status, run.honest.Score, run.honest.Reason,
		run.bomb.Status, run.bomb.Reason, lastLines(run.bomb.StderrTail, 2))
	// An honest job that could not even start (its runtime found no thread to
	// create) was starved too; only a bomb that did not run voids the cell.
	if !strings.Contains(run.bomb.StderrTail, "attack-ran bomb-hold") {
		return hostileOutcome("did not run"), detail
	}
	var harmed bool
	switch attack {
	case "starve-neighbour":
		harmed = run.honest.Status != StatusOK || run.honest.Score != hostileHonestScore
	case "bomb-scored":
		harmed = run.bomb.Status != StatusError || !strings.HasPrefix(run.bomb.Reason, "host refused a resource: process limit")
	}
	if harmed {
		return outcomeAllowed, detail
	}
	return outcomeBlocked, detail
}

// judgeRaiseLimits: blocked when every attempt to raise a limit failed and
// the job could not hold more processes than its limit.
func judgeRaiseLimits(res Result, limit uint64) (hostileOutcome, string) {
	tail := res.StderrTail
	detail := fmt.Sprintf("%s %s: %s", res.Status, res.Reason, lastLines(tail, 4))
	forks := -1
	for _, l := range strings.Split(tail, "\n") {
		if v, ok := strings.CutPrefix(l, "forks="); ok {
			forks, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	// Every job has a finite hard rlimit (CPU, file size), so a run that tried
	// shows at least one refused raise.
	if forks < 0 || !strings.Contains(tail, ": operation not permitted") {
		return hostileOutcome("did not run"), detail
	}
	if strings.Contains(tail, "RAISED ") || uint64(forks) > limit {
		return outcomeAllowed, detail
	}
	return outcomeBlocked, detail
}

// Without the jail and without a pids cgroup, RLIMIT_NPROC is per uid: one uid
// for every slot lets the bomb starve its neighbour (the suite's pidns and
// pgroup columns), a uid per slot (--run-as-range) does not.
func TestHostileJobsRunAsRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--run-as-range needs a root stage")
	}
	if testing.Short() {
		t.Skip("hostile: -short")
	}
	binDir := hostileDir(t, 0)
	bin := filepath.Join(binDir, "hostile")
	copyFile(t, helperPath(t), bin)
	jobs := hostileDir(t, 0)
	r := jail.UIDRange{First: 100100, Last: 100101}
	for _, tc := range []struct {
		name  string
		cfg   func(*CommandConfig)
		starv hostileOutcome
	}{
		{"one uid", func(*CommandConfig) {}, outcomeAllowed},
		{"uid per slot", func(c *CommandConfig) { c.RunAs, c.RunAsRange = nil, &r }, outcomeBlocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultCommandConfig()
			cfg.Argv = []string{bin, "run", PlaceholderArtifact}
			cfg.Env = map[string]string{helperEnv: "1"}
			cfg.TempDir, cfg.Timeout = jobs, 30*time.Second
			cfg.Containment, cfg.UseBwrap, cfg.AllowWeakContainment = jail.ContainmentPIDNamespace, false, true
			tc.cfg(&cfg)
			e, err := NewCommandExecutor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			procs := ownProcs()
			run, err := runNeighbours(e)
			waitProcsBelow(procs + 2)
			if err != nil {
				t.Fatal(err)
			}
			got, detail := judgeNeighbours("starve-neighbour", run)
			if got != tc.starv {
				t.Fatalf("starve-neighbour %s, want %s: %s", got, tc.starv, detail)
			}
			if tc.starv == outcomeBlocked && (run.honest.Status != StatusOK || run.honest.Score != hostileHonestScore) {
				t.Fatalf("honest job %s %v, want ok %v", run.honest.Status, run.honest.Score, hostileHonestScore)
			}
		})
	}
}

// A job whose forks the kernel refused at its pids limit printed a valid
// score line ({"score": 0}) and exited 0; it is recorded as an infrastructure error with
// the reason, never as that score.
func TestHostileJobsPidsLimitIsError(t *testing.T) {
	if err := jail.Probe(jail.ContainmentCgroup); err != nil {
		t.Skipf("no job cgroups here: %v", err)
	}
	_, marker := markerEnv(t)
	e := helperExec(t, marker, func(c *CommandConfig) {
		c.Containment, c.Limits.Processes = jail.ContainmentCgroup, 32
	})
	// The bomb, not raise-limits: helperExec's job runs as the stage, which
	// for a root stage may write its own pids.max.
	r := e.Execute(context.Background(), Job{Artifact: []byte("attack bomb-hold 30")})
	const want = "host refused a resource: process limit: the kernel refused "
	if r.Status != StatusError || !strings.HasPrefix(r.Reason, want) || !strings.HasSuffix(r.Reason, "at the job's pids limit of 32") {
		t.Fatalf("got %s %v %q (stderr %q), want status error, reason %q…", r.Status, r.Score, r.Reason, lastLines(r.StderrTail, 3), want)
	}
	assertNoLeftovers(t, marker)
}
