package health

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServeProbes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "wmrl_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Inc()
	var ready atomic.Bool
	srv, err := Serve("127.0.0.1:0", reg, nil, func() error {
		if !ready.Load() {
			return errors.New("no partitions assigned")
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path string
		ready      bool
		code       int
		body       string
	}{
		{"live without check", "/healthz", false, 200, "ok"},
		{"not ready says why", "/readyz", false, 503, "no partitions assigned"},
		{"ready", "/readyz", true, 200, "ok"},
		{"metrics", "/metrics", true, 200, "wmrl_test_things_total 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			code, body := get(tt.path)
			if code != tt.code || !strings.Contains(body, tt.body) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tt.path, code, body, tt.code, tt.body)
			}
		})
	}
}
