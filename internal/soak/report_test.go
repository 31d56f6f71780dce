//go:build soak

package soak

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A series is flat when, with x the number of ended runs, N the runs of the soak and b the
// series' value at the start (before the first run ended: the empty system's own footprint),
// the median of its samples in the last window (x ≥ 0.8·N, including the samples after the last
// run ended) exceeds b by at most flatRatio × what the median of the first window
// (0.2·N ≤ x < 0.4·N) exceeds it, plus the series' absolute slack:
//
//	median(last) − b ≤ 1.2 · max(0, median(first) − b) + slack
//
// The first 20% are warm-up (the first runs fill their windows). A leak of c per ended run adds
// about 0.3·N·c above b in the first window and 0.9·N·c in the last, so it fails once 0.54·N·c
// exceeds the slack. The least-squares slope per 100 ended runs over everything after the
// warm-up is reported beside it.
const (
	warmup    = 0.2
	firstEnd  = 0.4
	lastStart = 0.8
	flatRatio = 1.2
	// maxRebuild bounds one rebuild after the warm-up: reading a few dozen runs' snapshots takes
	// milliseconds (tens of ms to a few hundred on a loaded 2-core machine); one that read every
	// run ever seen would grow with them.
	maxRebuild = 5 * time.Second
)

// metric is one recorded series.
type metric struct {
	key, title, unit string
	get              func(sample) float64
	// slack is the absolute growth allowed on top of flatRatio, for series whose level is small
	// against their noise.
	slack float64
	// slack < 0 marks a series that is plotted and reported but not judged.
	// lifecycle marks series that stay flat only once ended runs are retired from the changelog
	// and Redis (and a rebuild no longer installs them again): the lifecycle branch's work.
	lifecycle bool
}

func metricsOf(sh shape) []metric {
	const mib = 1 << 20
	return []metric{
		{"rss", "correct RSS (sum of 3)", "MiB", func(s sample) float64 { return s.rss / mib }, 16, true},
		{"heap", "correct heap in use (sum of 3)", "MiB", func(s sample) float64 { return s.heap / mib }, 8, true},
		{"goroutines", "correct goroutines (sum of 3)", "", func(s sample) float64 { return s.goroutines }, 20, false},
		{"active_runs", "live runs held (wmrl_correct_active_runs, sum)", "", func(s sample) float64 { return s.activeRuns },
			float64(sh.concurrent), true},
		{"state_bytes", "state bytes held (wmrl_correct_state_bytes, sum)", "MiB", func(s sample) float64 {
			if !s.hasStateBytes {
				return math.NaN()
			}
			return s.stateBytes / mib
		}, 1, true},
		{"series", "Prometheus series (lines of /metrics, sum)", "", func(s sample) float64 { return s.series },
			float64(10 * sh.concurrent), true},
		{"changelog", "calibration changelog on the brokers (3 replicas)", "MiB", func(s sample) float64 { return s.changelogBytes / mib }, 0.25, true},
		// The replication backlog is a ring buffer (repl-backlog-size, 1 MiB by default) that the
		// write stream fills to its size however many runs ended: it is plotted, and left out of
		// what must stay flat.
		{"redis", "Redis used_memory − replication backlog (masters)", "MiB", func(s sample) float64 { return (s.redisBytes - s.redisBacklog) / mib }, 0.5, true},
		{"redis_used_memory", "Redis used_memory over the masters (backlog included)", "MiB", func(s sample) float64 { return s.redisBytes / mib }, -1, true},
		{"redis_dataset", "Redis used_memory_dataset over the masters", "MiB", func(s sample) float64 { return s.redisDataset / mib }, 0.5, true},
		{"redis_keys", "Redis keys over the masters", "", func(s sample) float64 { return s.redisKeys }, 100, true},
	}
}

// report is the soak's result.
type report struct {
	shape     shape
	elapsed   time.Duration
	lifecycle bool
	samples   []sample
	rebuilds  []rebuild
	faults    []faultEvent
	exact     exactness
	keys      keyInventory
	replays   []replayDigest
	verdicts  []verdict
	rebuildOK bool
	bound     int
	// failures fail the test; expected are failures of lifecycle-dependent checks while the
	// binary has no retention (reported, not failed, unless WMRL_SOAK_STRICT=1).
	failures, expected []string
}

type verdict struct {
	m                    metric
	start, end, slope    float64
	startN, endN         int
	limit                float64
	first, last, maximum float64
	ok, absent           bool
}

func (r *report) judge() {
	n := float64(r.shape.runs)
	strict := os.Getenv("WMRL_SOAK_STRICT") == "1"
	fail := func(lifecycle bool, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if lifecycle && !r.lifecycle && !strict {
			r.expected = append(r.expected, msg)
			return
		}
		r.failures = append(r.failures, msg)
	}
	for _, m := range metricsOf(r.shape) {
		var first, last, xs, ys []float64
		v := verdict{m: m, maximum: math.Inf(-1)}
		for i, s := range r.samples {
			y := m.get(s)
			if math.IsNaN(y) {
				continue
			}
			if i == 0 {
				v.first = y
			}
			v.last = y
			x := float64(s.ended)
			if x < warmup*n {
				continue
			}
			v.maximum = max(v.maximum, y)
			xs, ys = append(xs, x), append(ys, y)
			switch {
			case x < firstEnd*n:
				first = append(first, y)
			case x >= lastStart*n:
				last = append(last, y)
			}
		}
		if len(first) == 0 || len(last) == 0 {
			v.absent = true
			fail(m.lifecycle, "%s: no samples in the first or last window (first %d, last %d)", m.key, len(first), len(last))
			r.verdicts = append(r.verdicts, v)
			continue
		}
		v.start, v.end, v.startN, v.endN = median(first), median(last), len(first), len(last)
		v.slope = slope(xs, ys) * 100
		v.limit = v.first + flatRatio*max(0, v.start-v.first) + m.slack
		v.ok = v.end <= v.limit
		if m.slack < 0 {
			v.ok, v.limit = true, math.NaN()
		}
		if !v.ok {
			fail(m.lifecycle, "%s not flat: last-window median %.4g %s > %.4g = start %.4g + %.1f × (first-window median %.4g − start) + %.3g (slope %.3g per 100 ended runs)",
				m.key, v.end, m.unit, v.limit, v.first, flatRatio, v.start, m.slack, v.slope)
		}
		r.verdicts = append(r.verdicts, v)
	}
	// A rebuild after a rebalance reads the live runs and those ended within the retention;
	// the bound allows twice that.
	rate := float64(r.shape.runs) / r.elapsed.Seconds()
	r.bound = 2 * (r.shape.concurrent + int(math.Ceil(rate*r.shape.retention.Seconds())))
	r.rebuildOK = true
	for _, b := range r.rebuilds {
		if float64(b.ended) >= warmup*n && b.runs+b.endedRuns > r.bound {
			r.rebuildOK = false
			fail(true, "rebuild by %s at %d ended runs read %d live and %d ended runs (%d streams) in %v: more than %d, the bound by live runs",
				b.instance, b.ended, b.runs, b.endedRuns, b.streams, b.took, r.bound)
		}
		if float64(b.ended) >= warmup*n && b.took > maxRebuild {
			r.rebuildOK = false
			fail(true, "rebuild by %s at %d ended runs took %v (%d live and %d ended runs read): more than %v",
				b.instance, b.ended, b.took, b.runs, b.endedRuns, maxRebuild)
		}
	}
	if e := r.exact; e.lost != 0 || e.dup != 0 {
		fail(false, "advantage rows: %d lost, %d duplicated of %d", e.lost, e.dup, e.want)
	}
	for _, d := range r.replays {
		if d.err != nil || d.live != d.replay || d.deadLetters != 0 {
			fail(false, "replay of %s: digest %s, live %s, %d dead letters, err %v", d.run, d.replay, d.live, d.deadLetters, d.err)
		}
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// slope is the least-squares slope of y on x.
func slope(x, y []float64) float64 {
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxy, sxx float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// text is the summary as Markdown.
func (r *report) text() string {
	var b strings.Builder
	sh := r.shape
	fmt.Fprintf(&b, "# Soak (%s)\n\n%d runs ended in %v (%d in flight at a time, %d steps × %d groups × %d rollouts, %d streams; a step every %v).\n",
		sh.mode, r.exact.runs, r.elapsed.Round(time.Second), sh.concurrent, sh.steps, sh.groups, sh.groupSize, sh.streams, sh.tick)
	if r.lifecycle {
		fmt.Fprintf(&b, "Ended runs retired after --ended-run-retention %v.\n", sh.retention)
	} else {
		b.WriteString("The binary has no --ended-run-retention: ended runs' changelog keys and Redis keys are never retired, and a rebuild installs ended runs again; the checks that need retirement are reported below, not failed.\n")
	}
	fmt.Fprintf(&b, "\nFlat: last-window median (ended ≥ %.0f%% of the runs) − start ≤ %.1f × (first-window median (%.0f–%.0f%%) − start) + slack.\n\n",
		100*lastStart, flatRatio, 100*warmup, 100*firstEnd)
	b.WriteString("| series | unit | at start | first window | last window | limit | max after warm-up | slope / 100 ended runs | verdict |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.verdicts {
		word := "flat"
		switch {
		case v.m.slack < 0:
			word = "(not judged)"
		case v.absent:
			word = "ABSENT"
		case !v.ok:
			word = "GROWS"
		}
		fmt.Fprintf(&b, "| %s | %s | %.4g | %.4g | %.4g | %.4g | %.4g | %.3g | %s |\n", v.m.key, v.m.unit, v.first, v.start, v.end, v.limit, v.maximum, v.slope, word)
	}
	fmt.Fprintf(&b, "\nRebuilds (\"state loaded\" on an assignment; bound %d runs, %v each):\n\n| instance | ended runs | live runs read | ended runs read | streams | took |\n|---|---|---|---|---|---|\n", r.bound, maxRebuild)
	for _, e := range r.rebuilds {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %v |\n", e.instance, e.ended, e.runs, e.endedRuns, e.streams, e.took)
	}
	b.WriteString("\nFaults:\n\n| fault | took | ended runs before → after |\n|---|---|---|\n")
	for _, f := range r.faults {
		fmt.Fprintf(&b, "| %s | %v | %d → %d |\n", f.name, f.end.Sub(f.start).Round(100*time.Millisecond), f.endedAt, f.endedDone)
	}
	fmt.Fprintf(&b, "\nRedis keys at the end (all runs ended, %v after the last): %d, %d without expiry.\n\n| key pattern | keys | without expiry |\n|---|---|---|\n",
		3*sh.sample, r.keys.keys, r.keys.persistent)
	for _, p := range slices.Sorted(maps.Keys(r.keys.byPattern)) {
		c := r.keys.byPattern[p]
		fmt.Fprintf(&b, "| `%s` | %d | %d |\n", p, c[0], c[1])
	}
	e := r.exact
	fmt.Fprintf(&b, "\nAdvantage rows: %d published rollouts, %d rows read, %d lost, %d duplicated.\n", e.want, e.got, e.lost, e.dup)
	eq := 0
	for _, d := range r.replays {
		if d.err == nil && d.live == d.replay && d.deadLetters == 0 {
			eq++
		}
	}
	fmt.Fprintf(&b, "Replays: %d of %d runs (those in flight at each fault and a spread) replay to their live digest.\n", eq, len(r.replays))
	if len(r.failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range r.failures {
			b.WriteString("- " + f + "\n")
		}
	}
	if len(r.expected) > 0 {
		b.WriteString("\n## Not flat until ended runs are retired (no --ended-run-retention in this binary)\n\n")
		for _, f := range r.expected {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String()
}

// write puts summary.md, samples.csv, rebuilds.csv and the plots into dir.
func (r *report) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte(r.text()), 0o644); err != nil {
		return err
	}
	var c strings.Builder
	c.WriteString("t_seconds,ended_runs,started_runs,in_flight,instances,rss_bytes,heap_inuse_bytes,goroutines,active_runs,state_bytes,series,changelog_bytes,redis_used_memory,redis_used_memory_dataset,redis_keys,redis_replication_backlog\n")
	t0 := time.Time{}
	if len(r.samples) > 0 {
		t0 = r.samples[0].at
	}
	for _, s := range r.samples {
		sb := "NaN"
		if s.hasStateBytes || math.IsNaN(s.stateBytes) {
			sb = fmt.Sprintf("%.0f", s.stateBytes)
		}
		fmt.Fprintf(&c, "%.1f,%d,%d,%d,%d,%.0f,%.0f,%.0f,%.0f,%s,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", s.at.Sub(t0).Seconds(), s.ended, s.started, s.inFlight,
			s.instances, s.rss, s.heap, s.goroutines, s.activeRuns, sb, s.series, s.changelogBytes, s.redisBytes, s.redisDataset, s.redisKeys, s.redisBacklog)
	}
	if err := os.WriteFile(filepath.Join(dir, "samples.csv"), []byte(c.String()), 0o644); err != nil {
		return err
	}
	c.Reset()
	c.WriteString("t_seconds,instance,ended_runs,live_runs_read,ended_runs_read,streams,took_seconds\n")
	for _, e := range r.rebuilds {
		fmt.Fprintf(&c, "%.1f,%s,%d,%d,%d,%d,%.3f\n", e.at.Sub(t0).Seconds(), e.instance, e.ended, e.runs, e.endedRuns, e.streams, e.took.Seconds())
	}
	if err := os.WriteFile(filepath.Join(dir, "rebuilds.csv"), []byte(c.String()), 0o644); err != nil {
		return err
	}
	return r.plots(dir, t0)
}
