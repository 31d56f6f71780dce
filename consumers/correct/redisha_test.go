package correct

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// TestRedisHAFailover runs the consumer against a real Redis Cluster and a real Sentinel setup
// and moves every master in the middle of the run: the advantages stay exactly once with the
// digest of an uninterrupted run, and Redis ends up holding every (run, stream) at its last
// step, the state assembled from head and chunks matching the head's digest.
func TestRedisHAFailover(t *testing.T) {
	for _, tc := range []struct{ mode, fault string }{
		// A coordinated switch: CLUSTER FAILOVER on every replica; SENTINEL FAILOVER.
		{"cluster", "failover"},
		{"sentinel", "failover"},
		// The master holding the keys is SIGKILLed; its replica takes over.
		{"cluster", "kill"},
		{"sentinel", "kill"},
	} {
		mode := tc.mode
		t.Run(mode+"/"+tc.fault, func(t *testing.T) {
			t.Parallel()
			wl := faultWorkload
			wl.Steps = 50
			e := newFaultEnv(t, wl)
			ha := testenv.StartRedisHA(t, mode)
			cc := e.child(ha.URL, e.prefix+"tx", e.prefix+"member")
			cc.MetricsAddr = testenv.FreeAddr(t)
			var produced sync.WaitGroup
			var lastStepAt atomic.Int64 // unix nanoseconds
			produced.Add(1)
			go func() {
				defer produced.Done()
				e.producePaced(t, 300*time.Millisecond, func(int64, *kgo.Client, []*kgo.Record) { lastStepAt.Store(time.Now().UnixNano()) })
			}()
			c := startChild(t, cc, "child.log")
			probe := newAdvantageReader(t, e.seeds, e.names.Advantages(), true)
			probe.readUntil(t, e.total/4, 60*time.Second)
			before := len(probe.rows)
			target, err := conn.Options{RedisURL: ha.URL}.RedisTarget()
			if err != nil {
				t.Fatal(err)
			}
			rdb := target.Client(false)
			defer rdb.Close()
			if err := conn.CheckRedis(context.Background(), rdb, false); err != nil {
				t.Fatalf("start-up check of %s: %v", ha.URL, err)
			}
			checkWrongForm(t, ha, target)
			store := statestore.New(rdb, cc.RedisPrefix, 4)
			start := time.Now()
			if tc.fault == "kill" {
				ha.Run("kill", masterPort(t, target, rdb, store.HeadKey("r-0", "stream0")))
			} else {
				ha.Run("failover")
			}
			done := time.Now()
			t.Logf("%s %s after %d of %d rows took %v", mode, tc.fault, before, e.total, done.Sub(start).Round(time.Millisecond))
			produced.Wait()
			if time.Unix(0, lastStepAt.Load()).Before(done) {
				t.Fatal("every step was produced before the failover finished; lengthen the workload")
			}
			rd := e.verify(t, 90*time.Second)
			checkStoreAtLastStep(t, store, wl)
			t.Logf("%s %s: rows=%d digest %s; redis write errors %v, states rewritten after loss %v, digest alarms %v",
				mode, tc.fault, len(rd.rows), topics.DigestRows(rd.rows),
				scrape(t, cc.MetricsAddr, "wmrl_correct_redis_errors_total"),
				scrape(t, cc.MetricsAddr, "wmrl_correct_redis_state_lost_total"),
				scrape(t, cc.MetricsAddr, "wmrl_correct_redis_digest_mismatch_total"))
			if a := scrape(t, cc.MetricsAddr, "wmrl_correct_redis_digest_mismatch_total"); a != 0 {
				t.Fatalf("digest alarms: %v", a)
			}
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			if err, ok := c.wait(20 * time.Second); !ok || err != nil {
				t.Fatalf("graceful stop after SIGTERM: exited=%v err=%v", ok, err)
			}
		})
	}
}

// checkStoreAtLastStep waits until every (run, stream) head is at the workload's last step (the
// Redis write follows the commit asynchronously), then checks the streams sets and that the
// state assembled from its head and chunks has the head's digest.
func checkStoreAtLastStep(t *testing.T, store *statestore.Store, wl SynthConfig) {
	t.Helper()
	ctx := context.Background()
	last := int64(wl.Steps - 1)
	deadline := time.Now().Add(15 * time.Second)
	for r := range wl.Runs {
		run := fmt.Sprintf("r-%d", r)
		// A client's cluster slot map may still name a killed master until go-redis reloads it.
		streams, err := store.Streams(ctx, run)
		for (err != nil || len(streams) != wl.Streams) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			streams, err = store.Streams(ctx, run)
		}
		if err != nil || len(streams) != wl.Streams {
			t.Fatalf("streams set of %s: %v %v", run, streams, err)
		}
		for s := range wl.Streams {
			stream := fmt.Sprintf("stream%d", s)
			h, err := store.ReadHead(ctx, run, stream)
			for (err != nil || h.SealedStep != last) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				h, err = store.ReadHead(ctx, run, stream)
			}
			if err != nil || h.SealedStep != last {
				t.Fatalf("head %s/%s: %+v %v, want step %d", run, stream, h, err, last)
			}
			b, err := store.ReadState(ctx, run, stream, h.SealedStep)
			for err != nil && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				b, err = store.ReadState(ctx, run, stream, h.SealedStep)
			}
			if err != nil {
				t.Fatalf("state %s/%s: %v", run, stream, err)
			}
			st, err := correction.DecodeState(b)
			if err != nil {
				t.Fatalf("state %s/%s: %v", run, stream, err)
			}
			if sum := st.Digest(); hex.EncodeToString(sum[:]) != h.Digest {
				t.Fatalf("state %s/%s does not match the head's digest", run, stream)
			}
		}
	}
}

// masterPort returns the port of the master that holds key: the cluster node serving its slot,
// or the master the sentinels name.
func masterPort(t *testing.T, target conn.RedisTarget, rdb redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	var addr string
	switch target.Kind() {
	case conn.RedisCluster:
		m, err := rdb.(*redis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		addr = m.Options().Addr
	case conn.RedisSentinel:
		sc := redis.NewSentinelClient(&redis.Options{Addr: target.Failover.SentinelAddrs[0]})
		defer sc.Close()
		hp, err := sc.GetMasterAddrByName(ctx, target.Failover.MasterName).Result()
		if err != nil {
			t.Fatal(err)
		}
		addr = net.JoinHostPort(hp[0], hp[1])
	default:
		t.Fatalf("no master to find in a %s target", target.Kind())
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// checkWrongForm: the start-up check fails with a hint when the URL names the deployment
// wrongly: a cluster node given as a single server, or a master set the sentinels do not know.
func checkWrongForm(t *testing.T, ha *testenv.RedisHA, target conn.RedisTarget) {
	t.Helper()
	var wrong, want string
	switch target.Kind() {
	case conn.RedisCluster:
		wrong, want = "redis://"+target.Cluster.Addrs[0]+"/0", conn.ErrRedisIsCluster.Error()
	case conn.RedisSentinel:
		wrong, want = strings.Replace(ha.URL, "/wmrlmaster/", "/nosuchmaster/", 1), "no sentinel named a master"
	}
	wt, err := conn.Options{RedisURL: wrong}.RedisTarget()
	if err != nil {
		t.Fatal(err)
	}
	cl := wt.Client(true)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.CheckRedis(ctx, cl, false); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("check of %s: %v, want an error saying %q", wrong, err, want)
	}
}
