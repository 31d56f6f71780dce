package health

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PingInterval is how often Watch pings a cluster: about how long /readyz takes to notice an
// outage, and how often the lag gauges refresh.
const PingInterval = 2 * time.Second

// Watch pings cl every PingInterval until ctx ends and hands each result to report, whose ctx is
// bounded by the interval (for follow-up requests such as a lag lookup). Ping is ApiVersions on a
// live connection, so metadata served from a cache cannot hide an outage.
func Watch(ctx context.Context, cl *kgo.Client, report func(ctx context.Context, err error)) {
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, PingInterval)
		err := cl.Ping(pctx)
		if ctx.Err() != nil {
			cancel()
			return
		}
		report(pctx, err)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
