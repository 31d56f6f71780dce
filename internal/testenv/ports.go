package testenv

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// FreePortRun returns a base port p such that the loopback ports p..p+n−1 were free a moment ago
// and, when offset is not 0, p+offset..p+offset+n−1 too (a Redis Cluster's bus ports are its
// ports + 10000). The local scripts (cluster.sh, redis-ha.sh) number their ports from a base, so
// the tests that start them need a run of free ports, not n scattered ones.
func FreePortRun(t testing.TB, n, offset int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(20000)
		if runFree(base, n) && (offset == 0 || runFree(base+offset, n)) {
			return base
		}
	}
	t.Fatalf("no run of %d free ports (offset %d)", n, offset)
	return 0
}

// runFree reports whether base..base+n−1 can be listened on.
func runFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		_ = ln.Close()
	}
	return true
}
