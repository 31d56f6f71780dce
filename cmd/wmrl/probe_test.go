package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			time.Sleep(time.Second)
		default:
			http.Error(w, "not ready: no assignment", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	cases := []struct {
		name, url, wantErr string
		timeout            time.Duration
	}{
		{"ready", srv.URL + "/readyz", "", time.Second},
		{"not ready", srv.URL + "/other", "503 Service Unavailable: not ready: no assignment", time.Second},
		{"timeout", srv.URL + "/slow", "deadline exceeded", 50 * time.Millisecond},
		{"nothing listening", closed.URL + "/readyz", "connection refused", time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			_, err := probe(ctx, c.url)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("probe: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("probe error %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}
