package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
)

// TestSinkProbe: a sink is ready only while its loop runs and its cluster answers the probe's
// ping; an unreachable cluster is reported as such.
func TestSinkProbe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seeds   func(t testing.TB) []string
		running bool
		want    string // "" = ready
	}{
		{"live broker", testenv.Kafka, true, ""},
		{"loop not running", testenv.Kafka, false, "not running"},
		{"nothing listening", func(testing.TB) []string { return []string{"127.0.0.1:1"} }, true, "kafka unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &sinkProbe{}
			p.running.Store(tc.running)
			if err := p.ready(); err == nil {
				t.Fatal("ready before the first ping")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go p.watch(ctx, []kgo.Opt{kgo.SeedBrokers(tc.seeds(t)...)})
			deadline := time.Now().Add(10 * time.Second)
			for p.cluster.Load() == nil && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			err := p.ready()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ready = %v, want ready", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ready = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
