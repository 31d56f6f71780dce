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
