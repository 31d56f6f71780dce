package worldmodel

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Probe checks --model against the server's model list when there is one, and stays tolerant
// of servers whose list is missing, empty or not JSON (a warning says --model was not checked).
func TestProbeChecksModel(t *testing.T) {
	list := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/models":
				if body == "" {
					http.NotFound(w, r)
					return
				}
				_, _ = io.WriteString(w, body)
			case "/v1/chat/completions":
				http.Error(w, "bad request", http.StatusBadRequest)
			default:
				http.NotFound(w, r)
			}
		}
	}
	cases := []struct {
		name, body, wantErr, wantWarn string
	}{
		{"served", `{"object":"list","data":[{"id":"other"},{"id":"judge"}]}`, "", ""},
		{"not served", `{"object":"list","data":[{"id":"llama-3"},{"id":"qwen"}]}`, `--model "judge" is not served by --base-url`, ""},
		{"no model list", "", "", "lists no models (GET /models: 404): --model is not checked"},
		{"empty list", `{"object":"list","data":[]}`, "", "cannot check --model"},
		{"not json", `<html>hello</html>`, "", "not an OpenAI model list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(list(c.body))
			defer srv.Close()
			var logs bytes.Buffer
			s, err := NewOpenAIScorer(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "judge", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Probe(t.Context())
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("probe: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrUnreachable)):
				t.Fatalf("probe error %v, want ErrUnreachable containing %q", err, c.wantErr)
			}
			if c.wantErr != "" && !strings.Contains(err.Error(), `it serves "llama-3", "qwen"`) {
				t.Fatalf("error %v does not name the served models", err)
			}
			if c.wantWarn != "" && !strings.Contains(logs.String(), c.wantWarn) {
				t.Fatalf("log %q, want a warning containing %q", logs.String(), c.wantWarn)
			}
			if c.wantWarn == "" && strings.Contains(logs.String(), "WARN") {
				t.Fatalf("unexpected warning: %s", logs.String())
			}
		})
	}
}
