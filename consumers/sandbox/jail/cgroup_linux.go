package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupHost is where this process may create job cgroups: its own cgroup in
// each usable hierarchy. A hybrid host (cgroup v1 controllers plus a
// controller-less cgroup2 mount, as on many CI machines) yields v2 for
// kill/placement and v1 for memory and pids.
type cgroupHost struct {
	v2       string // own cgroup directory in a cgroup2 mount with cgroup.kill; "" if none
	v2Memory bool   // memory (and pids when v2Pids) are enabled for v2's children
	v2Pids   bool
	v1Memory string // own cgroup directory in the v1 memory hierarchy; "" if none
	v1Pids   string
}

// jobSeq numbers job cgroups across all executors of this process.
var jobSeq atomic.Uint64

// usable reports whether jobs can be contained: some hierarchy to kill
// through and a memory controller.
func (h *cgroupHost) usable() bool {
	return (h.v2 != "" || h.v1Memory != "") && (h.v2Memory || h.v1Memory != "")
}

func (h *cgroupHost) String() string {
	var parts []string
	if h.v2 != "" {
		parts = append(parts, "v2 "+h.v2+" (cgroup.kill, clone into cgroup)")
	} else {
		parts = append(parts, "v1 kill loop")
	}
	switch {
	case h.v2Memory:
		parts = append(parts, "memory: v2")
	case h.v1Memory != "":
		parts = append(parts, "memory: v1 "+h.v1Memory)
	}
	switch {
	case h.v2Pids:
		parts = append(parts, "pids: v2")
	case h.v1Pids != "":
		parts = append(parts, "pids: v1 "+h.v1Pids)
	default:
		parts = append(parts, "pids: none (RLIMIT_NPROC only)")
	}
	return strings.Join(parts, "; ")
}

// procFiles are where detection reads the mount table and this process's
// cgroups; tests point them at edited copies to hide a hierarchy. v1Only
// ignores the cgroup2 mount (Config.CgroupV1Only).
type procFiles struct {
	mounts, cgroup string
	v1Only         bool
}

var selfProcFiles = procFiles{mounts: "/proc/self/mounts", cgroup: "/proc/self/cgroup"}

// detectCgroups finds this process's cgroups in every mounted hierarchy and
// checks, by creating a probe child, that job cgroups can be made there. The
// returned notes say why a hierarchy was not usable.
func detectCgroups(pf procFiles) (*cgroupHost, []string) {
	var notes []string
	mounts, err := os.ReadFile(pf.mounts)
	if err != nil {
		return &cgroupHost{}, []string{"read mount table: " + err.Error()}
	}
	own, err := os.ReadFile(pf.cgroup)
	if err != nil {
		return &cgroupHost{}, []string{"read own cgroups: " + err.Error()}
	}
	v2mnt, v1mnt := parseCgroupMounts(mounts)
	if pf.v1Only {
		v2mnt = ""
	}
	v2path, v1path := parseProcCgroup(own)
	h := &cgroupHost{}
	if v2mnt == "" {
		notes = append(notes, "no cgroup2 mount")
	} else {
		dir := filepath.Join(v2mnt, v2path)
		if err := probeCgroupDir(dir, "cgroup.kill"); err != nil {
			notes = append(notes, "cgroup v2: "+err.Error())
		} else {
			h.v2 = dir
			h.v2Memory, h.v2Pids, err = enableV2Controllers(dir)
			if err != nil {
				notes = append(notes, "cgroup v2 memory controller: "+err.Error())
			}
		}
	}
	for _, v1 := range []struct{ ctrl, file string }{{"memory", "memory.limit_in_bytes"}, {"pids", "pids.max"}} {
		ctrl := v1.ctrl
		if h.v2Memory && ctrl == "memory" || h.v2Pids && ctrl == "pids" {
			continue
		}
		mnt, ok := v1mnt[ctrl]
		if !ok {
			notes = append(notes, "no cgroup v1 "+ctrl+" hierarchy")
			continue
		}
		dir := filepath.Join(mnt, v1path[ctrl])
		if err := probeCgroupDir(dir, v1.file); err != nil {
			notes = append(notes, "cgroup v1 "+ctrl+": "+err.Error())
			continue
		}
		if ctrl == "memory" {
			h.v1Memory = dir
		} else {
			h.v1Pids = dir
		}
	}
	return h, notes
}

// parseCgroupMounts returns the cgroup2 mount point and the v1 mount point of
// each controller, from /proc/self/mounts.
func parseCgroupMounts(mounts []byte) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		switch f[2] {
		case "cgroup2":
			if v2 == "" {
				v2 = unescapeMount(f[1])
			}
		case "cgroup":
			for _, o := range strings.Split(f[3], ",") {
				if o == "memory" || o == "pids" {
					v1[o] = unescapeMount(f[1])
				}
			}
		}
	}
	return v2, v1
}

// unescapeMount undoes the octal escapes (\040 for space) of /proc/mounts.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseProcCgroup returns this process's v2 path and its v1 path per
// controller, from /proc/self/cgroup ("id:controllers:path" lines).
func parseProcCgroup(b []byte) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			v2 = path
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			v1[c] = path
		}
	}
	return v2, v1
}

// probeCgroupDir creates and removes a child of dir and checks that the child
// has file want, proving job cgroups can be made there.
func probeCgroupDir(dir, want string) error {
	probe := filepath.Join(dir, fmt.Sprintf("wmrl-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Errorf("cannot create a child cgroup in %s: %w", dir, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, want)); err != nil {
		return fmt.Errorf("child cgroup of %s has no %s (kernel too old?)", dir, want)
	}
	return nil
}

// enableV2Controllers makes memory (and pids, if offered) available to the
// children of dir. The kernel refuses when dir itself holds processes and is
// not the root ("no internal processes"): then wmrl must run in a leaf of a
// cgroup delegated to it (e.g. systemd Delegate=yes), which is reported.
func enableV2Controllers(dir string) (memory, pids bool, err error) {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return false, false, err
	}
	offered := strings.Fields(string(avail))
	has := func(c string) bool { return slices.Contains(offered, c) }
	if !has("memory") {
		return false, false, fmt.Errorf("not offered in %s (controllers: %q; on a hybrid host memory is a v1 hierarchy)", dir, strings.TrimSpace(string(avail)))
	}
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false, false, err
	}
	enabled := strings.Fields(string(sub))
	want := "+memory"
	if has("pids") && !slices.Contains(enabled, "pids") {
		want += " +pids"
	}
	if !slices.Contains(enabled, "memory") || strings.Contains(want, "pids") {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(want), 0); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				return false, false, fmt.Errorf("cannot enable it for children of %s, which holds processes; run wmrl in a leaf of a cgroup delegated to it: %w", dir, err)
			}
			return false, false, fmt.Errorf("enable in %s: %w", dir, err)
		}
	}
	return true, has("pids"), nil
}

// cgroupJob is one job's cgroups. The child enters them at fork: on v2 via
// clone3(CLONE_INTO_CGROUP), on v1 because the forking thread (locked to its
// goroutine) joins the job's v1 cgroups just before and leaves just after.
type cgroupJob struct {
	v2     string
	v2fd   int
	v1     []string // job directories in v1 hierarchies
	v1Home []string // the matching directories the thread returns to
	memory string   // directory whose OOM counter is read
	v2mem  bool
	pids   string // directory whose pids.events counts the forks refused at pids.max; "" if none
}

// newJob creates the job's cgroups with the limits applied.
func (h *cgroupHost) newJob(l Limits) (*cgroupJob, error) {
	name := fmt.Sprintf("wmrl-%d-%d", os.Getpid(), jobSeq.Add(1))
	j := &cgroupJob{v2fd: -1}
	fail := func(err error) (*cgroupJob, error) {
		j.remove()
		return nil, fmt.Errorf("sandbox: job cgroup: %w", err)
	}
	if h.v2 != "" {
		j.v2 = filepath.Join(h.v2, name)
		if err := os.Mkdir(j.v2, 0o755); err != nil {
			j.v2 = ""
			return fail(err)
		}
		if h.v2Memory {
			j.memory, j.v2mem = j.v2, true
			if h.v2Pids {
				j.pids = j.v2
			}
			if err := writeLimits(j.v2, l, v2Files); err != nil {
				return fail(err)
			}
		}
		fd, err := unix.Open(j.v2, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		j.v2fd = fd
	}
	for _, v1 := range []struct {
		home  string
		files []limitFile
	}{{h.v1Memory, v1MemoryFiles}, {h.v1Pids, v1PidsFiles}} {
		if v1.home == "" || (h.v2Memory && v1.home == h.v1Memory) {
			continue
		}
		dir := filepath.Join(v1.home, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(err)
		}
		j.v1, j.v1Home = append(j.v1, dir), append(j.v1Home, v1.home)
		switch v1.home {
		case h.v1Memory:
			j.memory = dir
		case h.v1Pids:
			j.pids = dir
		}
		if err := writeLimits(dir, l, v1.files); err != nil {
			return fail(err)
		}
	}
	return j, nil
}

// limitFile writes one limit; value returns "" to leave the file alone.
type limitFile struct {
	name     string
	optional bool // absent on some kernels (swap accounting off)
	value    func(Limits) string
}

func bytesOrEmpty(v uint64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(v, 10)
}

var (
	v2Files = []limitFile{
		{name: "memory.max", value: func(l Limits) string { return bytesOrEmpty(l.MemoryBytes) }},
		{name: "memory.swap.max", optional: true, value: func(l Limits) string {
			if l.MemoryBytes == 0 {
				return ""
			}
			return "0"
		}},
		// One process over the limit takes the whole job down, as a wall-clock timeout does.
		{name: "memory.oom.group", optional: true, value: func(Limits) string { return "1" }},
		{name: "pids.max", optional: true, value: func(l Limits) string { return bytesOrEmpty(l.Processes) }},
	}
	v1MemoryFiles = []limitFile{
		{name: "memory.limit_in_bytes", value: func(l Limits) string { return bytesOrEmpty(l.MemoryBytes) }},
		// memory+swap equal to memory: the job cannot swap its way past the limit.
		{name: "memory.memsw.limit_in_bytes", optional: true, value: func(l Limits) string { return bytesOrEmpty(l.MemoryBytes) }},
	}
	v1PidsFiles = []limitFile{
		{name: "pids.max", value: func(l Limits) string { return bytesOrEmpty(l.Processes) }},
	}
)

func writeLimits(dir string, l Limits, files []limitFile) error {
	for _, f := range files {
		v := f.value(l)
		if v == "" {
			continue
		}
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			if f.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("set %s=%s: %w", p, v, err)
		}
	}
	return nil
}

// enter prepares attr and the calling thread, which must be locked to its
// goroutine, so that the next fork lands in the job's cgroups; leave moves
// the thread back and must run right after the fork.
func (j *cgroupJob) enter(attr *syscall.SysProcAttr) (leave func() error, err error) {
	if j.v2fd >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, j.v2fd
	}
	tid := []byte(strconv.Itoa(unix.Gettid()))
	leave = func() error {
		var errs []error
		for _, home := range j.v1Home {
			errs = append(errs, os.WriteFile(filepath.Join(home, "tasks"), tid, 0))
		}
		return errors.Join(errs...)
	}
	for _, dir := range j.v1 {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
			return nil, errors.Join(fmt.Errorf("sandbox: join %s: %w", dir, err), leave())
		}
	}
	return leave, nil
}

// kill SIGKILLs every process in the job. On v2 cgroup.kill does it
// atomically (forks racing with it are killed too); on v1 the listed
// processes are killed until none are left, so a process forked during a
// round is caught by the next.
func (j *cgroupJob) kill() {
	if j.v2 != "" {
		if err := os.WriteFile(filepath.Join(j.v2, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	if len(j.v1) == 0 {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		pids := j.procs(j.v1[0])
		if len(pids) == 0 || len(pids) == 1 && pids[0] == os.Getpid() {
			return
		}
		for _, p := range pids {
			// Our own pid is listed while the forking thread sits in the
			// job's v1 cgroups; never kill ourselves.
			if p != os.Getpid() {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// procs lists the live processes of the cgroup dir.
func (j *cgroupJob) procs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// oomKills is the number of processes the kernel OOM-killed in the job.
func (j *cgroupJob) oomKills() int {
	if j.memory == "" {
		return 0
	}
	file := "memory.oom_control" // v1: "oom_kill N" since Linux 4.13
	if j.v2mem {
		file = "memory.events"
	}
	return readCounter(filepath.Join(j.memory, file), "oom_kill ")
}

// pidsRefused is the number of forks the kernel refused the job because its
// cgroup was at pids.max: the "max" line of pids.events (v1 and v2).
func (j *cgroupJob) pidsRefused() int {
	if j.pids == "" {
		return 0
	}
	return readCounter(filepath.Join(j.pids, "pids.events"), "max ")
}

// hasPids reports whether the job has a pids cgroup (Limits.Processes is then
// its pids.max, observable through pidsRefused); false without a cgroup host.
func (h *cgroupHost) hasPids() bool { return h != nil && (h.v2Memory && h.v2Pids || h.v1Pids != "") }

// readCounter reads the value of the line "<prefix>N" of a cgroup's flat-keyed file (0 if absent).
func readCounter(file, prefix string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// remove kills what is left and removes the job's cgroups. A cgroup whose
// last processes are still exiting cannot be removed yet, hence the retries.
func (j *cgroupJob) remove() error {
	if j.v2fd >= 0 {
		_ = unix.Close(j.v2fd)
		j.v2fd = -1
	}
	dirs := append(slices.Clone(j.v1), j.v2)
	var errs []error
	for _, d := range dirs {
		if d == "" {
			continue
		}
		// Killed processes leave the cgroup only once the kernel has reaped them, which takes
		// longer on a loaded machine: retry for up to 10 s before reporting it.
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			if time.Now().After(deadline) {
				break
			}
			j.kill()
			time.Sleep(5 * time.Millisecond)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
