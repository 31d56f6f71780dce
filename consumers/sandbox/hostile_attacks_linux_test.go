package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The hostile job's attacks, run by the test binary inside the sandbox
// ("attack NAME ARGS…"). Each attack tries, prints what it got on stderr and
// exits 0; the test decides from the host side (files, processes, listener
// accepts, the stderr tail) whether it worked, so a job that merely claims
// success cannot pass for one that did. "attack-ran" proves the job started.

// hostileSecretEnv is the stage-side secret the environ attack looks for.
const hostileSecretEnv = "WMRL_TEST_HOSTILE_SECRET"

// hostileForks is how many processes the fork bomb tries to hold at once.
const hostileForks = 1000

// hostileFillMiB is what the disk-fill attack writes to every location; the
// suite's job directory quota is well below it.
const hostileFillMiB = 48

func hostileAttack(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "attack: no name")
		return 100
	}
	fmt.Fprintln(os.Stderr, "attack-ran", args[0])
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch args[0] {
	case "environ":
		// attack environ STAGEPID: the stage's environment, then everyone's.
		paths := []string{"/proc/" + arg(1) + "/environ"}
		all, _ := filepath.Glob("/proc/[0-9]*/environ")
		for _, p := range append(paths, all...) {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			for _, kv := range strings.Split(string(b), "\x00") {
				if strings.HasPrefix(kv, hostileSecretEnv+"=") {
					fmt.Fprintln(os.Stderr, "stolen", kv)
					return 0
				}
			}
		}
		fmt.Fprintln(os.Stderr, "environ: nothing found")
	case "secret-file", "shadow":
		// attack secret-file PATH | attack shadow
		p := arg(1)
		if args[0] == "shadow" {
			p = "/etc/shadow"
		}
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "stolen %.64s\n", b)
	case "write-outside":
		// attack write-outside MARKER DIR…: a file named MARKER in each DIR.
		for _, d := range args[2:] {
			err := os.WriteFile(filepath.Join(d, arg(1)), []byte("pwned"), 0o644)
			fmt.Fprintf(os.Stderr, "write %s: %v\n", d, err)
		}
	case "remount":
		// attack remount MARKER DIR: make the read-only view writable, then
		// write a file named MARKER in the host directory DIR.
		for _, p := range []string{"/", arg(2)} {
			err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND, "")
			fmt.Fprintf(os.Stderr, "remount %s rw: %v\n", p, err)
		}
		err := os.WriteFile(filepath.Join(arg(2), arg(1)), []byte("pwned"), 0o644)
		fmt.Fprintf(os.Stderr, "write %s: %v\n", arg(2), err)
	case "cgroup-escape":
		// attack cgroup-escape MARKER: a daemon moves itself into the parent
		// (and root) of every cgroup the job is in.
		return hostileSpawnDaemon(arg(1), true)
	case "daemonise":
		return hostileSpawnDaemon(arg(1), false)
	case "daemon":
		// daemon MARKER ESCAPE: the long-lived process; MARKER is in argv so
		// the host finds it in /proc/PID/cmdline.
		if arg(2) == "1" {
			hostileCgroupMove()
		}
		time.Sleep(60 * time.Second)
	case "forkbomb":
		sh, err := exec.LookPath("sh")
		if err != nil {
			fmt.Fprintln(os.Stderr, "forkbomb: no sh:", err)
			return 0
		}
		script := fmt.Sprintf(`ok=0; i=0
while [ $i -lt %d ]; do if sleep 20 2>/dev/null & then ok=$((ok+1)); else break; fi; i=$((i+1)); done
echo "forks=$ok" >&2`, hostileForks)
		return execOrFail(sh, []string{"sh", "-c", script})
	case "fill-disk":
		// attack fill-disk MARKER DIR…: HOSTILE_FILL MiB into each DIR.
		buf := make([]byte, 1<<20)
		for _, d := range args[2:] {
			n, err := fillFile(filepath.Join(d, arg(1)), buf, hostileFillMiB)
			fmt.Fprintf(os.Stderr, "fill %s=%d MiB (%v)\n", d, n, err)
		}
	case "network":
		// attack network PORT…: the host's loopback services.
		for _, port := range args[1:] {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
			if err == nil {
				c.Close()
			}
			fmt.Fprintf(os.Stderr, "connect %s: %v\n", port, err)
		}
	case "bomb-hold", "honest-forks", "raise-limits":
		return hostileBudgetAttack(args) // hostile_budget_linux_test.go
	default:
		if code, ok := hostileKernelJob(args); ok {
			return code
		}
		fmt.Fprintln(os.Stderr, "attack: unknown", args[0])
		return 100
	}
	fmt.Println(`{"score": 0}`)
	return 0
}

func execOrFail(path string, argv []string) int {
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 101
}

func fillFile(path string, buf []byte, mib int) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for i := 0; i < mib; i++ {
		if _, err := f.Write(buf); err != nil {
			return i, err
		}
	}
	return mib, f.Sync()
}

// hostileSpawnDaemon starts "daemon MARKER" in a new session through a
// middle process that exits at once, so the daemon is orphaned outside the
// job's session and process group.
func hostileSpawnDaemon(marker string, escape bool) int {
	self, _ := os.Executable()
	esc := "0"
	if escape {
		esc = "1"
	}
	c := exec.Command(self, "attack", "daemon", marker, esc)
	c.Env = os.Environ()
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 0
	}
	_ = c.Process.Release()
	// Give the daemon time to move itself before the job's main exits.
	time.Sleep(300 * time.Millisecond)
	fmt.Println(`{"score": 0}`)
	return 0
}

// hostileCgroupMove writes the calling process into the parent and the root
// of each of its cgroups, in every hierarchy it can find mounted.
func hostileCgroupMove() {
	mounts := cgroupMountsFromMountinfo()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cgroup-escape:", err)
		return
	}
	defer f.Close()
	pid := []byte(strconv.Itoa(os.Getpid()))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
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
				continue
			}
			for _, target := range []string{filepath.Dir(filepath.Join(mnt, parts[2])), mnt} {
				err := os.WriteFile(filepath.Join(target, "cgroup.procs"), pid, 0)
				fmt.Fprintf(os.Stderr, "move to %s: %v\n", target, err)
			}
		}
	}
}

// cgroupMountsFromMountinfo maps each v1 controller (and "cgroup2") to its
// mount point as the job sees it.
func cgroupMountsFromMountinfo() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if fields := strings.Fields(line); len(fields) > 9 {
			sep := 6
			for sep < len(fields) && fields[sep] != "-" {
				sep++
			}
			if sep+3 < len(fields) {
				fstype, opts := fields[sep+1], fields[sep+3]
				switch fstype {
				case "cgroup2":
					out["cgroup2"] = fields[4]
				case "cgroup":
					for _, o := range strings.Split(opts, ",") {
						out[o] = fields[4]
					}
				}
			}
		}
		if errors.Is(err, io.EOF) || err != nil {
			return out
		}
	}
}
