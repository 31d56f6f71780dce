package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// Helpers for tests that run wmrl stages as processes (cmd/wmrl's end-to-end tests, the chaos
// harness).

// SyncBuffer collects a subprocess's output while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StageEnv is the parent's environment without WMRL_* and API-key variables, so only the flags a
// test passes configure the commands it starts.
func StageEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "WMRL_") || strings.HasPrefix(kv, "OPENAI_API_KEY=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WorldModel is an OpenAI-compatible chat endpoint whose score is the artifact's "wm" value,
// found in the rendered prompt; requests, when not nil, counts the calls.
func WorldModel(requests *atomic.Int64) http.Handler {
	wmRE := regexp.MustCompile(`"wm":\s*([0-9][0-9.]*)`)
	mux := http.NewServeMux()
	// The model list answers worldmodel's start-up probe (not counted in requests).
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if requests != nil {
			requests.Add(1)
		}
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		reply := "I cannot tell."
		if m := wmRE.FindStringSubmatch(req.Messages[len(req.Messages)-1].Content); m != nil {
			reply = fmt.Sprintf(`{"score": %s}`, m[1])
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "e2e", "object": "chat.completion",
			"choices": []any{map[string]any{
				"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": reply},
			}},
		})
	})
	return mux
}
