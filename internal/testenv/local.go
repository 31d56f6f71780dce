package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Helpers for tests that start services of their own with the scripts of deploy/local (a Kafka
// broker or 3-broker cluster, Redis, a Redis Cluster or Sentinel set-up) on free ports.

// SkipOrFail skips the test because it cannot run here (a missing binary, an unusable sandbox),
// or fails it when services are required (Required): there a skipped test would be a lie.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// NeedBinaries skips (or fails, see SkipOrFail) the test unless every one of bins is on PATH.
func NeedBinaries(t testing.TB, bins ...string) {
	t.Helper()
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			SkipOrFail(t, "%s not on PATH: %v", bin, err)
		}
	}
}

// FreeAddr returns a loopback address "127.0.0.1:port" that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePortRun(t, 1, 0))
}

// RepoRoot is the repository's root: the nearest directory above the test's working directory
// (its package's directory) that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Local runs the scripts of deploy/local with a WMRL_LOCAL_DIR of the test's own (Dir) and the
// variables it was made with (the ports), so its services meet neither the developer's nor
// another test's.
type Local struct {
	Dir     string // WMRL_LOCAL_DIR
	t       testing.TB
	scripts string
	env     []string
}

// NewLocal makes a Local with vars ("NAME=value") added to the test's environment.
func NewLocal(t testing.TB, vars ...string) *Local {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "local")
	env := append(append(os.Environ(), "WMRL_LOCAL_DIR="+dir), vars...)
	return &Local{Dir: dir, t: t, scripts: filepath.Join(RepoRoot(t), "deploy", "local"), env: env}
}

// Run runs the script name (e.g. "cluster.sh") with args and returns its standard output; a
// failure fails the test.
func (l *Local) Run(name string, args ...string) string {
	l.t.Helper()
	out, err := l.Try(name, args...)
	if err != nil {
		l.t.Fatal(err)
	}
	return out
}

// Try is Run returning the failure, with the script's standard error, instead of failing the
// test (for a goroutine, or a cleanup).
func (l *Local) Try(name string, args ...string) (string, error) {
	l.t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(l.scripts, name)}, args...)...)
	cmd.Env = l.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		l.t.Logf("%s %s: %s", name, strings.Join(args, " "), msg)
	}
	return string(out), nil
}

// stopAtCleanup runs the script's stop action (with args before it, e.g. the mode) when the test
// ends.
func (l *Local) stopAtCleanup(name string, args ...string) {
	l.t.Cleanup(func() {
		if _, err := l.Try(name, append(args, "stop")...); err != nil {
			l.t.Error(err)
		}
	})
}

// RedisHA is a Redis Cluster ("cluster": 3 masters with a replica each) or Sentinel set-up
// ("sentinel": master, replica and 3 sentinels) of deploy/local/redis-ha.sh, private to one test.
type RedisHA struct {
	Mode  string
	URL   string // the --redis URL
	Base  int    // the port of the first server; the others follow it
	local *Local
}

// StartRedisHA starts mode on a run of free ports and stops it when the test ends; without
// redis-server and redis-cli it skips the test (or fails it, see SkipOrFail).
func StartRedisHA(t testing.TB, mode string) *RedisHA {
	t.Helper()
	NeedBinaries(t, "redis-server", "redis-cli")
	base := FreePortRun(t, 6, 10000)
	h := &RedisHA{Mode: mode, Base: base, local: NewLocal(t, "WMRL_TEST_REDIS_HA_PORT="+strconv.Itoa(base))}
	t.Cleanup(func() {
		if t.Failed() {
			h.logs(t)
		}
	})
	h.local.stopAtCleanup("redis-ha.sh", mode)
	start := time.Now()
	h.Run("start")
	h.URL = strings.TrimSpace(h.Run("url"))
	t.Logf("Redis %s up in %v: %s", mode, time.Since(start).Round(100*time.Millisecond), h.URL)
	return h
}

// Run runs one action of redis-ha.sh (failover, kill PORT, …) and returns its standard output.
func (h *RedisHA) Run(action string, args ...string) string {
	h.local.t.Helper()
	return h.local.Run("redis-ha.sh", append([]string{h.Mode, action}, args...)...)
}

// logs prints the tail of every server's log.
func (h *RedisHA) logs(t testing.TB) {
	files, _ := filepath.Glob(filepath.Join(h.local.Dir, "redis-"+h.Mode, "*", "redis.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		t.Logf("--- %s ---\n%s", f, b[max(0, len(b)-1500):])
	}
}

// KafkaCluster is a 3-broker Kafka cluster of deploy/local/cluster.sh, private to one test.
type KafkaCluster struct {
	Seeds  []string
	Client *kgo.Client
	Admin  *kadm.Client
	local  *Local
}

// StartKafkaCluster starts the cluster on a run of free ports and stops it when the test ends.
func StartKafkaCluster(t testing.TB) *KafkaCluster {
	t.Helper()
	base := FreePortRun(t, 6, 0)
	c := &KafkaCluster{local: NewLocal(t, "WMRL_CLUSTER_BASE_PORT="+strconv.Itoa(base))}
	start := time.Now()
	c.Run("start")
	c.local.stopAtCleanup("cluster.sh")
	t.Logf("3-broker cluster up in %v", time.Since(start).Round(100*time.Millisecond))
	for i := range 3 {
		c.Seeds = append(c.Seeds, fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.Client, c.Admin = cl, kadm.NewClient(cl)
	return c
}

// Run runs cluster.sh with args (stop-node N, kill-node N, …).
func (c *KafkaCluster) Run(args ...string) string {
	c.local.t.Helper()
	return c.local.Run("cluster.sh", args...)
}

// Try is Run returning the failure instead of failing the test.
func (c *KafkaCluster) Try(args ...string) (string, error) {
	c.local.t.Helper()
	return c.local.Try("cluster.sh", args...)
}

// WaitFullISR waits until every partition of topics (all topics when none is named) has a
// leader and its three replicas in sync again, or ctx ends.
func (c *KafkaCluster) WaitFullISR(ctx context.Context, topics ...string) error {
	for {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		md, err := c.Admin.Metadata(mctx, topics...)
		cancel()
		short := 0
		if err == nil {
			for _, td := range md.Topics {
				for _, pd := range td.Partitions {
					if len(pd.ISR) < 3 || pd.Leader < 0 {
						short++
					}
				}
			}
		}
		if err == nil && short == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions not fully in sync: %d short: %w", short, errors.Join(ctx.Err(), err))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
