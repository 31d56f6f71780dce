package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// TestRunsListRedisCluster: on a real 3-master Redis Cluster (deploy/local/redis-ha.sh), where a
// run's keys and its streams' keys sit in different slots, `runs list` finds every run by
// scanning each master and reads them in cross-slot pipelines, and `runs show` reads one.
func TestRunsListRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	url := testenv.StartRedisHA(t, "cluster").URL

	target, err := conn.Options{RedisURL: url}.RedisTarget()
	if err != nil {
		t.Fatal(err)
	}
	rdb := target.Client(false)
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("%s: a %T, want a cluster client", url, rdb)
	}
	const prefix, n = "cl", 60
	s := statestore.New(rdb, prefix, 3)
	runs := make([]string, n)
	for i := range runs {
		runs[i] = fmt.Sprintf("run-%02d", i)
	}
	writeSealed(t, s, sealedRun(t, "x", "code", 30), runs...)
	ctx := context.Background()
	end := statestore.RunEnd{LastStep: 29, EndedAt: time.Now().Add(-time.Minute), Reason: topics.EndReasonMarker}
	for _, run := range []string{"run-07", "only-end"} {
		if err := s.RecordEnd(ctx, run, end); err != nil {
			t.Fatal(err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls concurrently
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k, err := c.DBSize(ctx).Result()
		if k > 0 {
			masters.Add(1)
		}
		return err
	}); err != nil || masters.Load() < 3 {
		t.Fatalf("the runs' keys are on %d masters (%v), want 3", masters.Load(), err)
	}

	code, out, errOut := runCLIOut("--redis", url, "runs", "list", "--changelog=false", "--redis-prefix", prefix)
	if code != 0 {
		t.Fatalf("runs list: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n+2 {
		t.Fatalf("%d lines, want a header and %d runs:\n%s", len(lines), n+1, out)
	}
	for _, re := range []string{`(?m)^only-end\s+ended\s+-\s+-\s+0 B\s`, `(?m)^run-07\s+ended\s+29\s+code\s`, `(?m)^run-59\s+active\s+29\s+code\s+\d`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("runs list lacks %s:\n%s", re, out)
		}
	}
	code, out, errOut = runCLIOut("--redis", url, "--brokers", "127.0.0.1:1", "--startup-timeout", "2s",
		"runs", "show", "run-07", "--redis-prefix", prefix)
	if code != 0 || !strings.Contains(out, "): ended ") || !regexp.MustCompile(`(?m)^code\s+29\s+300\s`).MatchString(out) ||
		!strings.Contains(out, "partition unknown") {
		t.Fatalf("runs show: exit %d\n%s%s", code, out, errOut)
	}
}
