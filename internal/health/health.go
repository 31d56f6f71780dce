// Package health serves a stage's operational HTTP endpoints: /metrics for Prometheus,
// /healthz (the process runs its loop) and /readyz (it can do its work now: cluster reachable,
// partitions assigned, state loaded). Every stage serves the same three paths, so probes and
// scrape configs are written once. Stages whose work can fail without failing the stage (the
// world model's scoring, the sandbox's executions) add /healthz/scoring, which fails while most
// recent results are failures (see Failures).
package health

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports nil when the probed condition holds, or why it does not.
type Check func() error

// Server is the running endpoint; Stop shuts it down.
type Server struct {
	srv  *http.Server
	addr string
}

// Endpoint is a further probe path served next to the three standard ones.
type Endpoint struct {
	Path  string
	Check Check
}

// ScoringPath is the probe of a stage's scoring (or execution) failure share.
const ScoringPath = "/healthz/scoring"

// Serve listens on addr and serves /metrics from g, /healthz from live, /readyz from ready and
// each extra endpoint from its check (a nil check always passes). A failing check answers 503
// with its error as the body.
func Serve(addr string, g prometheus.Gatherer, live, ready Check, log *slog.Logger, extra ...Endpoint) (*Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", probe(live))
	mux.Handle("/readyz", probe(ready))
	for _, e := range extra {
		mux.Handle(e.Path, probe(e.Check))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, addr: ln.Addr().String()}
	go func() { _ = s.srv.Serve(ln) }()
	if log != nil {
		log.Info("serving metrics", "addr", s.addr)
	}
	return s, nil
}

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.addr }

// Stop shuts the server down, waiting up to two seconds for requests in flight.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

func probe(c Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if c != nil {
			if err := c(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}
