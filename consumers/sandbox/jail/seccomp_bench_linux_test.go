package jail

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// BenchmarkJobStart is the cost of the seccomp filter per job: a trivial job
// (/bin/true) in the default jail with the filter and with it off, one of
// each per iteration in alternating order so both see the same machine, the
// percentiles of each and their ratios reported from the same run.
//
//	go test -run '^$' -bench BenchmarkJobStart -benchtime 400x ./consumers/sandbox/jail/
func BenchmarkJobStart(b *testing.B) {
	jails := map[string]*Jail{}
	for name, cfg := range map[string]Config{
		"filter":    {},
		"no-filter": {NoSeccomp: true, AllowWeakContainment: true},
	} {
		cfg.Limits, cfg.UseBwrap, cfg.RunAs, cfg.Logger = DefaultLimits(), true, privateRunAs(), slog.New(slog.DiscardHandler)
		j, err := New(cfg, []string{"/bin/true"})
		if err != nil {
			b.Fatal(err)
		}
		jails[name] = j
	}
	// Wall time from Run's call to its return, and the job's CPU time
	// (less sensitive to a loaded machine).
	times, cpu := map[string][]time.Duration{}, map[string][]time.Duration{}
	order := []string{"filter", "no-filter"}
	for b.Loop() {
		for _, name := range order {
			dir := b.TempDir()
			start := time.Now()
			o := jails[name].Run(context.Background(), Job{Dir: dir, Argv: []string{"/bin/true"}, Env: []string{"PATH=" + DefaultPath},
				Timeout: 30 * time.Second, StdoutMax: 1 << 10, StderrMax: 1 << 10})
			times[name] = append(times[name], time.Since(start))
			cpu[name] = append(cpu[name], o.CPU)
			if o.SetupErr != nil || o.StartErr != nil || o.ExitCode != 0 {
				b.Fatalf("%s: %+v", name, o)
			}
		}
		slices.Reverse(order)
	}
	pct := func(name string, p float64) float64 { return percentileMS(times[name], p) }
	for _, name := range []string{"filter", "no-filter"} {
		b.ReportMetric(percentileMS(cpu[name], 0.50), "p50-cpu-"+name+"-ms")
	}
	for _, name := range []string{"filter", "no-filter"} {
		b.ReportMetric(pct(name, 0.50), "p50-"+name+"-ms")
		b.ReportMetric(pct(name, 0.99), "p99-"+name+"-ms")
	}
	b.ReportMetric(pct("filter", 0.50)/pct("no-filter", 0.50), "p50-ratio")
	b.ReportMetric(pct("filter", 0.99)/pct("no-filter", 0.99), "p99-ratio")
	b.ReportMetric(0, "ns/op") // two jobs per iteration: the percentiles are the numbers
}

func percentileMS(d []time.Duration, p float64) float64 {
	t := slices.Clone(d)
	slices.Sort(t)
	return float64(t[min(len(t)-1, int(p*float64(len(t))))]) / 1e6
}

// BenchmarkSeccompBuild is the filter's one-off cost at start-up.
func BenchmarkSeccompBuild(b *testing.B) {
	for b.Loop() {
		if _, err := buildSeccomp(); err != nil {
			b.Fatal(err)
		}
	}
}
