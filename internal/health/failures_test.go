package health

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFailures drives the window with sequences of results and checks Check, the share gauge
// and the rate-limited warnings.
func TestFailures(t *testing.T) {
	fail := errors.New(`judge replied "<html>502</html>": no number`)
	tests := []struct {
		name      string
		window    int
		maxShare  float64
		results   string // o: ok, f: failed; one per 1s of the fake clock
		unhealthy bool
		warnings  int
		share     float64
	}{
		{"all ok", 10, 0.5, "oooooooooooo", false, 0, 0},
		{"too few results to judge", 100, 0.5, "fffffffff", false, 1, 1},
		{"ten failures in a row", 100, 0.5, "ffffffffff", true, 1, 1},
		{"share at the threshold passes", 10, 0.5, "fofofofofo", false, 1, 0.5},
		{"share above the threshold fails", 10, 0.5, "ffofofofof", true, 1, 0.6},
		{"old failures leave the window", 10, 0.5, "ffffffffff" + "oooooooooo", false, 1, 0},
		{"warned again after LogEvery", 100, 0.5, strings.Repeat("f", 25), true, 3, 1},
		{"threshold above 1 never fails", 10, 1.5, "ffffffffff", false, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			now := time.Unix(0, 0)
			var share float64
			f := NewFailures(FailuresConfig{
				What: "scoring", Window: tt.window, MaxShare: tt.maxShare, LogEvery: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Share:  func(v float64) { share = v },
				Now:    func() time.Time { return now },
			})
			for _, r := range tt.results {
				var err error
				if r == 'f' {
					err = fail
				}
				f.Observe(err)
				now = now.Add(time.Second)
			}
			err := f.Check()
			if (err != nil) != tt.unhealthy || (err != nil && (!errors.Is(err, ErrFailureShare) || !strings.Contains(err.Error(), fail.Error()))) {
				t.Errorf("Check() = %v, want unhealthy %v with the latest error", err, tt.unhealthy)
			}
			if got := strings.Count(logs.String(), "level=WARN"); got != tt.warnings {
				t.Errorf("%d warnings, want %d:\n%s", got, tt.warnings, logs.String())
			}
			if tt.warnings > 0 && !strings.Contains(logs.String(), fmt.Sprintf("first_error=%q", fail.Error())) {
				t.Errorf("warning lacks the first error verbatim:\n%s", logs.String())
			}
			if share != tt.share {
				t.Errorf("share gauge %v, want %v", share, tt.share)
			}
		})
	}
}

// TestServeScoringEndpoint checks that an extra endpoint is served with its check's verdict.
func TestServeScoringEndpoint(t *testing.T) {
	f := NewFailures(FailuresConfig{What: "scoring", Window: 10, Logger: slog.New(slog.DiscardHandler)})
	srv, err := Serve("127.0.0.1:0", nil, nil, nil, nil, Endpoint{Path: ScoringPath, Check: f.Check})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	code := func() int {
		resp, err := http.Get("http://" + srv.Addr() + ScoringPath)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := code(); c != http.StatusOK {
		t.Fatalf("fresh %s = %d, want 200", ScoringPath, c)
	}
	for range 10 {
		f.Observe(errors.New("down"))
	}
	if c := code(); c != http.StatusServiceUnavailable {
		t.Fatalf("%s after 10 failures = %d, want 503", ScoringPath, c)
	}
}

// TestFailuresBurstCountedWhenItHappens: 1,280 failures in one second used to be logged as
// "failed=1" (the first of the burst) and the other 1,279 only with the first failure of the next
// incident; Watch's tick now logs them once LogEvery has passed, without a new failure.
func TestFailuresBurstCountedWhenItHappens(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(0, 0)
	f := NewFailures(FailuresConfig{What: "scoring", LogEvery: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
	fail := errors.New("judge down")
	for range 1280 {
		f.Observe(fail)
	}
	f.tick() // within LogEvery: nothing more yet
	if got := strings.Count(logs.String(), "level=WARN"); got != 1 || !strings.Contains(logs.String(), "failed=1 results=1 ") {
		t.Fatalf("after the burst: %d warnings, want the first failure alone:\n%s", got, logs.String())
	}
	now = now.Add(10 * time.Second)
	f.tick()
	if !strings.Contains(logs.String(), "failed=1279 results=1279 failed_total=1280") {
		t.Fatalf("LogEvery after the burst: the rest of it not logged:\n%s", logs.String())
	}
	now = now.Add(time.Minute)
	f.tick() // nothing new: no warning
	if got := strings.Count(logs.String(), "level=WARN"); got != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", got, logs.String())
	}
}

// TestFailuresStall: work in flight with no result for StallAfter fails Check and warns (once
// per LogEvery); a result ends the stall.
func TestFailuresStall(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(0, 0)
	f := NewFailures(FailuresConfig{What: "worldmodel", LogEvery: 10 * time.Second, StallAfter: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
	for range 3 {
		f.Begin()
	}
	now = now.Add(9 * time.Second)
	f.tick()
	if err := f.Check(); err != nil || logs.Len() > 0 {
		t.Fatalf("9 s in flight: Check %v, log %q; want healthy and quiet", err, logs.String())
	}
	now = now.Add(time.Second)
	f.tick()
	f.tick()
	if err := f.Check(); !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "3 in flight and no result for 10s") {
		t.Fatalf("10 s in flight: Check %v, want %v with the counts", err, ErrStalled)
	}
	if got := strings.Count(logs.String(), "worldmodel stalled"); got != 1 || !strings.Contains(logs.String(), "in_flight=3") {
		t.Fatalf("want one stall warning with in_flight=3:\n%s", logs.String())
	}
	f.End() // an answer: progress
	if err := f.Check(); err != nil {
		t.Fatalf("after a result: Check %v", err)
	}
	now = now.Add(10 * time.Second)
	if err := f.Check(); !errors.Is(err, ErrStalled) {
		t.Fatalf("stalled again: Check %v", err)
	}
	f.End()
	f.End()
	now = now.Add(time.Hour)
	if err := f.Check(); err != nil {
		t.Fatalf("nothing in flight: Check %v", err)
	}
}
