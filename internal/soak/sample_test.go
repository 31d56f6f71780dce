//go:build soak

package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sample is one reading of the footprint; the correct figures are summed over the instances
// that answered (an instance being restarted is missing from a sample or two).
type sample struct {
	at                       time.Time
	ended, started, inFlight int
	instances                int
	rss, heap, goroutines    float64
	activeRuns, stateBytes   float64
	hasStateBytes            bool
	series                   float64 // lines of /metrics that are not comments
	changelogBytes           float64 // the calibration topic on every broker's log dirs (3 replicas)
	redisBytes               float64 // used_memory summed over the masters
	redisDataset, redisKeys  float64 // used_memory_dataset and db0's keys over the masters
	redisBacklog             float64 // mem_replication_backlog over the masters
}

// rebuild is one "state loaded" line of a correct instance: what it read from the changelog on
// an assignment, and how long that took.
type rebuild struct {
	at                   time.Time
	instance             string
	ended, streams, runs int
	// endedRuns are the ended runs whose end the rebuild read (kept until their retention).
	endedRuns int
	took      time.Duration
}

// sampler reads the footprint every shape.sample.
type sampler struct {
	h        *harness
	w        *fleet
	mu       sync.Mutex
	got      []sample
	rebuilds []rebuild
	offsets  map[string]int64 // how far each instance's log has been read
	rdb      map[int]*redis.Client
}

func newSampler(h *harness, w *fleet) *sampler {
	s := &sampler{h: h, w: w, offsets: map[string]int64{}, rdb: map[int]*redis.Client{}}
	for _, p := range h.redisPorts {
		s.rdb[p] = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p), MaxRetries: -1})
	}
	return s
}

// run samples in the background until stop, which the test's cleanup also calls.
func (s *sampler) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.h.sh.sample)
		defer t.Stop()
		for {
			s.take(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			s.take(context.Background())
			for _, c := range s.rdb {
				c.Close()
			}
		})
	}
	s.h.t.Cleanup(stop)
	return stop
}

func (s *sampler) take(ctx context.Context) {
	sm := sample{at: time.Now(), ended: s.w.endedNow(), started: int(s.w.started.Load()), inFlight: len(s.w.inFlight())}
	procs, urls := s.h.instances()
	for i, p := range procs {
		if p == nil {
			continue
		}
		s.readLog(p, sm.ended)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := scrape(pctx, urls[i]+"/metrics")
		cancel()
		if err != nil {
			continue
		}
		rss, err := rssBytes(p.Cmd.Process.Pid)
		if err != nil {
			continue
		}
		sm.instances++
		sm.rss += rss
		sm.heap += m.values["go_memstats_heap_inuse_bytes"]
		sm.goroutines += m.values["go_goroutines"]
		sm.activeRuns += m.values["wmrl_correct_active_runs"]
		if v, ok := m.values["wmrl_correct_state_bytes"]; ok {
			sm.stateBytes += v
			sm.hasStateBytes = true
		}
		sm.series += float64(m.series)
	}
	if sm.instances < len(procs) {
		// An instance is being restarted: a sum over fewer processes is not a reading.
		nan := math.NaN()
		sm.rss, sm.heap, sm.goroutines, sm.activeRuns, sm.stateBytes, sm.series = nan, nan, nan, nan, nan, nan
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	sm.changelogBytes = s.changelogBytes(cctx)
	cancel()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	sm.redisBytes, sm.redisDataset, sm.redisKeys, sm.redisBacklog = s.redisMemory(rctx)
	cancel()
	s.mu.Lock()
	s.got = append(s.got, sm)
	s.mu.Unlock()
}

// metrics is one /metrics page: each metric name's values summed over its series.
type metrics struct {
	values map[string]float64
	series int
}

func scrape(ctx context.Context, url string) (metrics, error) {
	m := metrics{values: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("%s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m.series++
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name, rest = line[:i], line[strings.LastIndexByte(line, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			m.values[name] += v
		}
	}
	return m, sc.Err()
}

// rssBytes is VmRSS of /proc/<pid>/status.
func rssBytes(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// changelogBytes sums the calibration topic's partition sizes over every broker's log dirs.
func (s *sampler) changelogBytes(ctx context.Context) float64 {
	dirs, err := s.h.kafka.Admin.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return math.NaN() // a broker is down: not a reading
	}
	var n float64
	topic := s.h.names.Calibration()
	for _, byDir := range dirs {
		for _, d := range byDir {
			for _, parts := range d.Topics {
				for _, p := range parts {
					if p.Topic == topic {
						n += float64(p.Size)
					}
				}
			}
		}
	}
	return n
}

// redisMemory sums INFO's used_memory, used_memory_dataset, db0's keys and
// mem_replication_backlog over the servers that are masters now (after a failover, the former
// replicas).
func (s *sampler) redisMemory(ctx context.Context) (used, dataset, keys, backlog float64) {
	masters := 0
	for _, c := range s.rdb {
		info, err := c.Info(ctx, "replication", "memory", "keyspace").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			continue
		}
		masters++
		for _, l := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(l, ":")
			switch k {
			case "used_memory":
				f, _ := strconv.ParseFloat(v, 64)
				used += f
			case "used_memory_dataset":
				f, _ := strconv.ParseFloat(v, 64)
				dataset += f
			case "mem_replication_backlog":
				f, _ := strconv.ParseFloat(v, 64)
				backlog += f
			case "db0":
				n, _, _ := strings.Cut(strings.TrimPrefix(v, "keys="), ",")
				f, _ := strconv.ParseFloat(n, 64)
				keys += f
			}
		}
	}
	if masters != 3 {
		// A master did not answer (or a failover is half done): not a reading.
		nan := math.NaN()
		return nan, nan, nan, nan
	}
	return used, dataset, keys, backlog
}

// dumpRedisMemory writes every master's INFO memory to path, to tell what used_memory is made
// of (data, or the server's own overhead).
func (s *sampler) dumpRedisMemory(ctx context.Context, path string) {
	var b strings.Builder
	for port, c := range s.rdb {
		info, err := c.Info(ctx, "replication", "memory", "keyspace").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			continue
		}
		fmt.Fprintf(&b, "### master 127.0.0.1:%d\n%s\n", port, info)
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// readLog picks the "state loaded" lines out of an instance's new log lines.
func (s *sampler) readLog(p *proc, ended int) {
	f, err := os.Open(p.log.Name())
	if err != nil {
		return
	}
	defer f.Close()
	off := s.offsets[p.Name]
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		off += int64(len(line))
		if !strings.Contains(line, `"msg":"state loaded"`) {
			continue
		}
		var ev struct {
			Time    time.Time `json:"time"`
			Streams int       `json:"streams"`
			Runs    int       `json:"runs"`
			Ended   int       `json:"ended_runs"`
			// slog's JSON handler writes a duration in nanoseconds, its text handler as a string.
			Took json.RawMessage `json:"took"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		var took time.Duration
		if ns, err := strconv.ParseInt(string(ev.Took), 10, 64); err == nil {
			took = time.Duration(ns)
		} else {
			var s string
			_ = json.Unmarshal(ev.Took, &s)
			took, _ = time.ParseDuration(s)
		}
		s.mu.Lock()
		s.rebuilds = append(s.rebuilds, rebuild{at: ev.Time, instance: p.Name, ended: ended, streams: ev.Streams, runs: ev.Runs, endedRuns: ev.Ended, took: took})
		s.mu.Unlock()
	}
	s.offsets[p.Name] = off
}

func (s *sampler) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.got...)
}

func (s *sampler) rebuildEvents() []rebuild {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rebuild(nil), s.rebuilds...)
}

// keyInventory counts the keys on the Redis masters by pattern (digits replaced by #) and how
// many of each have no expiry, to tell what a growing used_memory is made of.
type keyInventory struct {
	keys, persistent int
	byPattern        map[string][2]int // pattern → keys, keys without expiry
}

func (s *sampler) inventory(ctx context.Context) keyInventory {
	inv := keyInventory{byPattern: map[string][2]int{}}
	for _, c := range s.rdb {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			continue
		}
		var keys []string
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		pipe := c.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.TTL(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		for i, k := range keys {
			pat := strings.Map(func(r rune) rune {
				if r >= '0' && r <= '9' {
					return '#'
				}
				return r
			}, k)
			e := inv.byPattern[pat]
			e[0]++
			inv.keys++
			if ttls[i].Err() == nil && ttls[i].Val() < 0 {
				e[1]++
				inv.persistent++
			}
			inv.byPattern[pat] = e
		}
	}
	return inv
}
